// resume-client: a load generator for resumed TLS handshakes (wrk never resumes a session).
//
// C concurrent loops each repeat: open a new TCP connection, do a TLS handshake resumed from a
// client session cache shared by all loops (TLS 1.3 tickets), send `GET PATH` with
// `Connection: close`, read the whole response, close. The cache hands each ticket out once, as
// RFC 8446 (C.4) asks of clients, and keeps the tickets every handshake brings, so a server that
// treats tickets as single-use resumes as well as one that does not.
//
// With -resume=false there is no session cache: every handshake is a full one (and the run fails
// if any was resumed). wrk cannot stand in for that either: after `Connection: close` it reuses
// the SSL object of the connection slot (SSL_clear), which offers the last session again, so
// its handshakes are resumptions too.
//
// -sni NAME sends NAME as the server name and verifies the certificate for it, whatever host the
// URL names (which may then be an IP address): a TLS passthrough proxy routes on the name sent.
//
// With an http:// URL there is no TLS at all: one plain HTTP request per connection (connection
// churn, issue 13). -reset changes how each connection ends: the request asks for keep-alive (so
// the server does not close) and the client closes with a reset (SO_LINGER 0) once it has read
// the whole response, as a client that gives up on a connection does.
//
// A warm-up phase (unmeasured, same cache) fills the cache and warms the server; then, with
// -sync, the client prints "ready" and waits for a line on stdin before the measured phase, so
// that the caller can sample the server's CPU time exactly around it. It prints key-value lines
// (requests, rps, p50_ms, p99_ms, errors, handshakes, resumed, resumed_fraction, tls) and exits 2
// when fewer than -min-resumed of the measured handshakes were resumptions: a resumption
// benchmark that does not resume measures something else.
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// ticketPool is a tls.ClientSessionCache that holds many sessions per key and hands each out once.
type ticketPool struct {
	mu       sync.Mutex
	sessions map[string][]*tls.ClientSessionState
	max      int
}

func (p *ticketPool) Get(key string) (*tls.ClientSessionState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sessions[key]
	if len(s) == 0 {
		return nil, false
	}
	cs := s[len(s)-1] // newest first
	p.sessions[key] = s[:len(s)-1]
	return cs, true
}

func (p *ticketPool) Put(key string, cs *tls.ClientSessionState) {
	if cs == nil { // "forget this session": Get already took it out
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := append(p.sessions[key], cs)
	if len(s) > p.max {
		s = s[len(s)-p.max:] // drop the oldest
	}
	p.sessions[key] = s
}

type stats struct {
	requests, errors, handshakes, resumed int64
	latencies                             []time.Duration
	firstErr                              error
}

type target struct {
	addr    string
	request []byte
	config  *tls.Config // nil: plain TCP
	reset   bool        // close with a reset (SO_LINGER 0) after the response
	tlsDesc atomic.Value
}

var curveNames = map[string]tls.CurveID{"x25519": tls.X25519, "p256": tls.CurveP256, "p384": tls.CurveP384}

func (t *target) once(st *stats) error {
	start := time.Now()
	raw, err := net.DialTimeout("tcp", t.addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer raw.Close()
	_ = raw.SetDeadline(start.Add(10 * time.Second))
	if t.reset {
		// Takes effect at the deferred Close: a RST instead of a FIN, and no TIME_WAIT here.
		_ = raw.(*net.TCPConn).SetLinger(0)
	}
	var conn io.ReadWriter = raw
	if t.config != nil {
		tc := tls.Client(raw, t.config)
		if err := tc.Handshake(); err != nil {
			return err
		}
		cs := tc.ConnectionState()
		st.handshakes++
		if cs.DidResume {
			st.resumed++
		}
		if t.tlsDesc.Load() == nil {
			t.tlsDesc.Store(fmt.Sprintf("%s %s %s", tls.VersionName(cs.Version), tls.CipherSuiteName(cs.CipherSuite), cs.CurveID))
		}
		conn = tc
	}
	if _, err := conn.Write(t.request); err != nil {
		return err
	}
	br := bufio.NewReaderSize(conn, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	st.latencies = append(st.latencies, time.Since(start))
	st.requests++
	return nil
}

// phase runs `conns` loops until `d` has passed and returns their merged counts and the time taken
// (until the last loop's request in flight at the deadline finished).
func phase(t *target, conns int, d time.Duration) (stats, time.Duration) {
	per := make([]stats, conns)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func(st *stats) {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := t.once(st); err != nil {
					st.errors++
					if st.firstErr == nil {
						st.firstErr = err
					}
					time.Sleep(time.Millisecond)
				}
			}
		}(&per[i])
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all stats
	for i := range per {
		all.requests += per[i].requests
		all.errors += per[i].errors
		all.handshakes += per[i].handshakes
		all.resumed += per[i].resumed
		all.latencies = append(all.latencies, per[i].latencies...)
		if all.firstErr == nil {
			all.firstErr = per[i].firstErr
		}
	}
	return all, elapsed
}

func pct(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)))
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return float64(sorted[i]) / 1e6
}

func main() {
	conns := flag.Int("c", 64, "concurrent connections (loops)")
	duration := flag.Duration("d", 10*time.Second, "measured duration")
	warmup := flag.Duration("warmup", time.Second, "unmeasured warm-up with the same session cache (fills it)")
	caFile := flag.String("cacert", "", "PEM certificate(s) to trust (default: the system roots)")
	insecure := flag.Bool("insecure", false, "do not verify the server's certificate")
	curves := flag.String("curves", "x25519,p256", "key exchange groups offered, in order (x25519, p256, p384)")
	resume := flag.Bool("resume", true, "resume sessions from the shared cache (false: no cache, full handshakes only)")
	minResumed := flag.Float64("min-resumed", 0.9, "fail (exit 2) when fewer measured handshakes than this were resumed")
	sync_ := flag.Bool("sync", false, `print "ready" after the warm-up and wait for a line on stdin before measuring`)
	reset := flag.Bool("reset", false, "ask for keep-alive and close each connection with a reset after its response")
	sni := flag.String("sni", "", "server name to send (SNI) and verify the certificate for (default: the URL's host)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: resume-client [flags] https://HOST:PORT/PATH | http://HOST:PORT/PATH\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(64)
	}
	u, err := url.Parse(flag.Arg(0))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Port() == "" {
		fmt.Fprintf(os.Stderr, "resume-client: want https:// or http://HOST:PORT/PATH, got %q\n", flag.Arg(0))
		os.Exit(64)
	}
	// Resolve once: the loops measure the server, not the resolver.
	ips, err := net.LookupIP(u.Hostname())
	if err != nil || len(ips) == 0 {
		fmt.Fprintf(os.Stderr, "resume-client: cannot resolve %s: %v\n", u.Hostname(), err)
		os.Exit(1)
	}
	ip := ips[0]
	for _, cand := range ips {
		if cand.To4() != nil {
			ip = cand
			break
		}
	}
	serverName := u.Hostname()
	if *sni != "" {
		serverName = *sni
	}
	cfg := &tls.Config{
		ServerName:         serverName,
		InsecureSkipVerify: *insecure,
		MinVersion:         tls.VersionTLS12,
	}
	if *resume {
		cfg.ClientSessionCache = &ticketPool{sessions: map[string][]*tls.ClientSessionState{}, max: 16 * *conns}
	}
	for _, name := range bytes.Split([]byte(*curves), []byte(",")) {
		id, ok := curveNames[string(name)]
		if !ok {
			fmt.Fprintf(os.Stderr, "resume-client: unknown curve %q\n", name)
			os.Exit(64)
		}
		cfg.CurvePreferences = append(cfg.CurvePreferences, id)
	}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "resume-client: %v\n", err)
			os.Exit(1)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			fmt.Fprintf(os.Stderr, "resume-client: no certificate in %s\n", *caFile)
			os.Exit(1)
		}
	}
	path := u.RequestURI()
	closing := "Connection: close\r\n"
	if *reset {
		closing = ""
	}
	t := &target{
		addr:    net.JoinHostPort(ip.String(), u.Port()),
		request: []byte(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", path, u.Host, closing)),
		config:  cfg,
		reset:   *reset,
	}
	plain := u.Scheme == "http"
	if plain {
		t.config = nil
	}
	if *warmup > 0 {
		w, _ := phase(t, *conns, *warmup)
		if w.requests == 0 {
			fmt.Fprintf(os.Stderr, "resume-client: no request succeeded in the warm-up: %v\n", w.firstErr)
			os.Exit(1)
		}
	}
	if *sync_ {
		fmt.Println("ready")
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			fmt.Fprintf(os.Stderr, "resume-client: waiting for the go-ahead on stdin: %v\n", err)
			os.Exit(1)
		}
	}
	st, elapsed := phase(t, *conns, *duration)
	sort.Slice(st.latencies, func(i, j int) bool { return st.latencies[i] < st.latencies[j] })
	frac := 0.0
	if st.handshakes > 0 {
		frac = float64(st.resumed) / float64(st.handshakes)
	}
	desc, _ := t.tlsDesc.Load().(string)
	fmt.Printf("requests %d\nduration_s %.3f\nrps %.1f\np50_ms %.3f\np99_ms %.3f\nerrors %d\nhandshakes %d\nresumed %d\nresumed_fraction %.4f\ntls %s\n",
		st.requests, elapsed.Seconds(), float64(st.requests)/elapsed.Seconds(), pct(st.latencies, 0.50), pct(st.latencies, 0.99),
		st.errors, st.handshakes, st.resumed, frac, desc)
	if st.firstErr != nil {
		fmt.Fprintf(os.Stderr, "resume-client: %d errors, the first: %v\n", st.errors, st.firstErr)
	}
	if plain {
		return
	}
	if !*resume && st.resumed > 0 {
		fmt.Fprintf(os.Stderr, "resume-client: %d of %d handshakes were resumed without a session cache: this run is invalid\n",
			st.resumed, st.handshakes)
		os.Exit(2)
	}
	if *resume && frac < *minResumed {
		fmt.Fprintf(os.Stderr, "resume-client: only %.1f%% of %d handshakes were resumed (need %.0f%%): the server did not resume sessions; this run is invalid\n",
			100*frac, st.handshakes, 100**minResumed)
		os.Exit(2)
	}
}
