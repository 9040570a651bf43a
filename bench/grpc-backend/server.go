package main

// The serving side: a single-goroutine HTTP/2 connection loop on x/net/http2's Framer and hpack,
// rather than net/http's server, which runs a goroutine per stream and spent about 90 µs of CPU
// per call here (h2load on the same core): the backend must not be what the proxies wait on.
// It speaks just enough HTTP/2 for a proxy in front of it: prior-knowledge preface, SETTINGS
// (and their ACKs), PING, WINDOW_UPDATE both ways (send windows honoured; what is received is
// given back at once), RST_STREAM and GOAWAY. Responses are written into one buffer that is
// flushed when no more input is waiting, so a batch of requests gets one write.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const (
	maxStreams = 1000    // gRPC-go sets no limit; this leaves room for proxies that multiplex
	recvWindow = 1 << 24 // stream and connection receive windows
)

type stream struct {
	ok     bool // POST, the path and content-type application/grpc
	body   []byte
	window int64 // send window
}

type conn struct {
	nc       net.Conn
	br       *bufio.Reader
	bw       *bufio.Writer
	fr       *http2.Framer
	hbuf     bytes.Buffer
	enc      *hpack.Encoder
	streams  map[uint32]*stream
	pending  []uint32 // answered streams whose response waits for send window
	window   int64    // connection send window
	initWin  int64    // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	received uint32   // DATA bytes not yet given back on the connection
}

func serve(ln net.Listener) error {
	for {
		nc, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			if err := newConn(nc).run(); err != nil && err != io.EOF {
				fmt.Fprintln(os.Stderr, "grpc-backend: connection:", err)
			}
			nc.Close()
		}()
	}
}

func newConn(nc net.Conn) *conn {
	c := &conn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), bw: bufio.NewWriterSize(nc, 64<<10),
		streams: map[uint32]*stream{}, window: 65535, initWin: 65535}
	c.fr = http2.NewFramer(c.bw, c.br)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 64 << 10
	c.enc = hpack.NewEncoder(&c.hbuf)
	return c
}

func (c *conn) run() error {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c.br, preface); err != nil {
		return err
	}
	if string(preface) != http2.ClientPreface {
		return fmt.Errorf("not an HTTP/2 prior-knowledge preface: %q", preface)
	}
	c.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: maxStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: recvWindow})
	c.fr.WriteWindowUpdate(0, recvWindow-65535)
	for {
		if c.br.Buffered() == 0 {
			if err := c.bw.Flush(); err != nil {
				return err
			}
		}
		f, err := c.fr.ReadFrame()
		if err != nil {
			return err
		}
		if err := c.frame(f); err != nil {
			return err
		}
	}
}

func (c *conn) frame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		err := f.ForeachSetting(func(s http2.Setting) error {
			switch s.ID {
			case http2.SettingInitialWindowSize:
				for _, st := range c.streams {
					st.window += int64(s.Val) - c.initWin
				}
				c.initWin = int64(s.Val)
			case http2.SettingHeaderTableSize:
				c.enc.SetMaxDynamicTableSizeLimit(s.Val)
			}
			return nil
		})
		if err != nil {
			return err
		}
		c.fr.WriteSettingsAck()
		c.sendPending()
	case *http2.MetaHeadersFrame:
		if _, open := c.streams[f.StreamID]; open { // trailers from the client: the request ends
			if f.StreamEnded() {
				c.answer(f.StreamID)
			}
			return nil
		}
		st := &stream{window: c.initWin}
		st.ok = f.PseudoValue("method") == "POST" && f.PseudoValue("path") == path &&
			strings.HasPrefix(headerValue(f, "content-type"), "application/grpc")
		c.streams[f.StreamID] = st
		if f.StreamEnded() {
			c.answer(f.StreamID)
		}
	case *http2.DataFrame:
		if f.Length > 0 { // the whole payload, padding included, counts against flow control
			c.received += f.Length
			if c.received >= recvWindow/2 {
				c.fr.WriteWindowUpdate(0, c.received)
				c.received = 0
			}
		}
		st := c.streams[f.StreamID]
		if st == nil {
			return nil
		}
		if len(st.body) < 64 {
			st.body = append(st.body, f.Data()...)
		} else {
			st.ok = false
		}
		if f.StreamEnded() {
			c.answer(f.StreamID)
		} else if f.Length > 0 {
			c.fr.WriteWindowUpdate(f.StreamID, f.Length)
		}
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			c.window += int64(f.Increment)
		} else if st := c.streams[f.StreamID]; st != nil {
			st.window += int64(f.Increment)
		}
		c.sendPending()
	case *http2.PingFrame:
		if !f.IsAck() {
			c.fr.WritePing(true, f.Data)
		}
	case *http2.RSTStreamFrame:
		delete(c.streams, f.StreamID)
	case *http2.GoAwayFrame:
		c.bw.Flush()
		return io.EOF
	}
	return nil
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, h := range f.RegularFields() {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
}

// answer responds on a stream whose request has ended: the response message with grpc-status 0
// when the request was the fixed call, else a trailers-only error.
func (c *conn) answer(id uint32) {
	st := c.streams[id]
	if !st.ok {
		c.headers(id, true, "200", "application/grpc", "12", "only POST "+path+" with content-type application/grpc")
		delete(c.streams, id)
		return
	}
	if !bytes.Equal(st.body, requestFrame) {
		c.headers(id, true, "200", "application/grpc", "3", "not the fixed request message")
		delete(c.streams, id)
		return
	}
	st.body = nil
	c.pending = append(c.pending, id)
	c.sendPending()
}

// sendPending writes the responses that the send windows allow, in order.
func (c *conn) sendPending() {
	n := int64(len(responseFrame))
	done := 0
	for _, id := range c.pending {
		st := c.streams[id]
		if st == nil { // reset meanwhile
			done++
			continue
		}
		if c.window < n || st.window < n {
			break
		}
		c.window -= n
		c.headers(id, false, "200", "application/grpc", "", "")
		c.fr.WriteData(id, false, responseFrame)
		c.hbuf.Reset()
		c.enc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: "0"})
		c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true, EndStream: true})
		delete(c.streams, id)
		done++
	}
	c.pending = append(c.pending[:0], c.pending[done:]...)
}

// headers writes a response head; with a grpc status (trailers-only) it also ends the stream.
func (c *conn) headers(id uint32, end bool, status, ctype, grpcStatus, grpcMessage string) {
	c.hbuf.Reset()
	c.enc.WriteField(hpack.HeaderField{Name: ":status", Value: status})
	c.enc.WriteField(hpack.HeaderField{Name: "content-type", Value: ctype})
	if grpcStatus != "" {
		c.enc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: grpcStatus})
		c.enc.WriteField(hpack.HeaderField{Name: "grpc-message", Value: grpcMessage})
	}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true, EndStream: end})
}
