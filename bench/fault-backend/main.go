// fault-backend: HTTP/1.1 backends whose faults the bad-day bench (bench/badday.py) sets while
// they run. One process serves every backend, each on its own port, and a control port:
//
//	fault-backend -control 127.0.0.1:18090 -listen 127.0.0.1:18091,127.0.0.1:18092,127.0.0.1:18093
//
// Each backend answers GET /__health with 200 always (so active checks pass and any ejection is
// passive, on real traffic) and any other request after its delay with its status; past its
// limit of requests at once it answers 503 at once (a server shedding load). Control:
//
//	GET /set?b=0&status=503&delay_ms=200&limit=32   sets backend 0 (keys left out keep their value)
//	GET /reset                                      every backend to 200, no delay, no limit; counts to 0
//	GET /stats                                      JSON: per backend requests, shed, and the arrival
//	                                                times (ms since its last /set) while it was delayed
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxArrivals bounds the arrival times kept per backend.
const maxArrivals = 200000

type backend struct {
	mu       sync.Mutex
	status   int
	delay    time.Duration
	limit    int64
	setAt    time.Time
	arrivals []float64

	inFlight atomic.Int64
	requests atomic.Int64
	shed     atomic.Int64
}

func (b *backend) settings() (int, time.Duration, int64, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.status, b.delay, b.limit, b.setAt
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/__health" {
		w.Header().Set("Content-Length", "2")
		w.Write([]byte("ok"))
		return
	}
	b.requests.Add(1)
	status, delay, limit, setAt := b.settings()
	n := b.inFlight.Add(1)
	defer b.inFlight.Add(-1)
	if limit > 0 && n > limit {
		b.shed.Add(1)
		reply(w, http.StatusServiceUnavailable, "shed")
		return
	}
	if delay > 0 {
		b.mu.Lock()
		if len(b.arrivals) < maxArrivals {
			b.arrivals = append(b.arrivals, float64(time.Since(setAt).Microseconds())/1000)
		}
		b.mu.Unlock()
		time.Sleep(delay)
	}
	reply(w, status, "hello from a fault backend")
}

func reply(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write([]byte(body))
}

type stats struct {
	Requests int64     `json:"requests"`
	Shed     int64     `json:"shed"`
	Arrivals []float64 `json:"arrivals_ms"`
}

func main() {
	control := flag.String("control", "127.0.0.1:18090", "control address")
	listen := flag.String("listen", "127.0.0.1:18091,127.0.0.1:18092,127.0.0.1:18093", "backend addresses, comma-separated")
	flag.Parse()
	var backends []*backend
	for _, addr := range strings.Split(*listen, ",") {
		b := &backend{status: 200, setAt: time.Now()}
		backends = append(backends, b)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			log.Fatal(err)
		}
		go func() { log.Fatal(http.Serve(ln, b)) }()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/set", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		i, err := strconv.Atoi(q.Get("b"))
		if err != nil || i < 0 || i >= len(backends) {
			http.Error(w, "b: a backend index", http.StatusBadRequest)
			return
		}
		b := backends[i]
		b.mu.Lock()
		defer b.mu.Unlock()
		for key, set := range map[string]func(int){
			"status":   func(v int) { b.status = v },
			"delay_ms": func(v int) { b.delay = time.Duration(v) * time.Millisecond },
			"limit":    func(v int) { b.limit = int64(v) },
		} {
			if s := q.Get(key); s != "" {
				v, err := strconv.Atoi(s)
				if err != nil {
					http.Error(w, key+": a number", http.StatusBadRequest)
					return
				}
				set(v)
			}
		}
		b.setAt = time.Now()
		b.arrivals = nil
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/reset", func(w http.ResponseWriter, r *http.Request) {
		for _, b := range backends {
			b.mu.Lock()
			b.status, b.delay, b.limit, b.setAt, b.arrivals = 200, 0, 0, time.Now(), nil
			b.mu.Unlock()
			b.requests.Store(0)
			b.shed.Store(0)
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		out := make([]stats, len(backends))
		for i, b := range backends {
			b.mu.Lock()
			out[i] = stats{Requests: b.requests.Load(), Shed: b.shed.Load(), Arrivals: append([]float64{}, b.arrivals...)}
			b.mu.Unlock()
		}
		json.NewEncoder(w).Encode(out)
	})
	log.Fatal(http.ListenAndServe(*control, mux))
}
