// grpc-backend: the h2c backend of the gRPC benchmark (bench/h2.py). It answers one fixed unary
// call, POST /bench.Bench/Unary, over HTTP/2 in clear text with prior knowledge (no Upgrade), as
// a gRPC server does: `content-type: application/grpc`, one length-prefixed message, then the
// trailers `grpc-status: 0` and `grpc-message` (empty). Anything else gets a trailers-only answer
// with grpc-status 12 (UNIMPLEMENTED) or 3 (INVALID_ARGUMENT). The server (server.go) is a
// frame-level loop on golang.org/x/net/http2; -check uses net/http's h2c client.
//
// The request and response messages are fixed protobuf bytes, not generated code: the request
// is `{1: "bench"}` (a string field 1), the response `{1: "hello from the backend"}`.
//
//	grpc-backend -listen 127.0.0.1:18081            serve
//	grpc-backend -write-request FILE                write the request body (a gRPC frame) for `h2load -d FILE`
//	grpc-backend -check http://127.0.0.1:18051      one unary call over h2c through a proxy; exit 1
//	                                                unless it got status 200, the response message
//	                                                and the trailer grpc-status 0
//
// With -call interop, -write-request and -check use the call bench/h2.py makes to grpc-go's interop
// server (bench/grpc-interop) instead: grpc.testing.TestService/UnaryCall with the SimpleRequest
// {response_size: 22, payload: {body: "bench"}}, answered by the SimpleResponse
// {payload: {body: 22 zero bytes}} (the interop server's answer to that request, byte for byte).
//
//	grpc-backend -call interop -write-request FILE
//	grpc-backend -call interop -check http://127.0.0.1:18071
//
// -call interop-large is the same call with response_size 65536 (grpc-large-h2c-interop).
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

const path = "/bench.Bench/Unary"

var (
	requestMessage  = protoString("bench")
	responseMessage = protoString("hello from the backend")
	requestFrame    = grpcFrame(requestMessage)
	responseFrame   = grpcFrame(responseMessage)
)

// A unary call: its path and the gRPC frames of its request and of the expected response.
type call struct {
	path              string
	request, response []byte
}

// interopResponseSize is the size of the payload asked of the interop server (field 2 of
// SimpleRequest), 22 bytes like this backend's own answer text; interopLargeResponseSize, that of
// the interop-large call (bench/h2.py's grpc-large-h2c-interop: DATA frames of 16 KiB each way).
const (
	interopResponseSize      = 22
	interopLargeResponseSize = 64 * 1024
)

var calls = map[string]call{
	// This backend's own call (served by serve, below).
	"bench": {path, requestFrame, responseFrame},
	// grpc.testing.TestService/UnaryCall of grpc-go's interop server (interop/server), by hand in
	// protobuf's wire format (grpc/testing/messages.proto): SimpleRequest field 2 response_size
	// (varint), field 3 payload (a Payload, whose field 2 is body); SimpleResponse field 1 payload.
	// Payload's field 1, type, is COMPRESSABLE (0), the default, so neither side writes it.
	"interop": {
		"/grpc.testing.TestService/UnaryCall",
		grpcFrame(append([]byte{0x10, interopResponseSize, 0x1a, 7}, protoBytes(2, []byte("bench"))...)),
		grpcFrame(protoBytes(1, protoBytes(2, make([]byte, interopResponseSize)))),
	},
	"interop-large": {
		"/grpc.testing.TestService/UnaryCall",
		grpcFrame(append(append([]byte{0x10}, varint(interopLargeResponseSize)...), append([]byte{0x1a, 7}, protoBytes(2, []byte("bench"))...)...)),
		grpcFrame(protoBytes(1, protoBytes(2, make([]byte, interopLargeResponseSize)))),
	},
}

// protoBytes is the protobuf encoding of a length-delimited field (bytes, string or message)
// numbered field (under 16) holding b.
func protoBytes(field byte, b []byte) []byte {
	return append(append([]byte{field<<3 | 2}, varint(len(b))...), b...)
}

// varint is protobuf's base-128 encoding of n.
func varint(n int) []byte {
	var b []byte
	for n >= 0x80 {
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
	return append(b, byte(n))
}

// protoString is the protobuf encoding of a message whose field 1 is the string s (s under 128 bytes).
func protoString(s string) []byte {
	return append([]byte{0x0a, byte(len(s))}, s...)
}

// grpcFrame is a gRPC length-prefixed message: not compressed (0), a 4-byte big-endian length, the message.
func grpcFrame(msg []byte) []byte {
	f := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(f[1:], uint32(len(msg)))
	return append(f, msg...)
}

func h2cOnly() *http.Protocols {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &p
}

// check makes one unary call c to base+c.path over h2c and verifies the answer.
func check(base string, c call) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Protocols: h2cOnly()}}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, strings.TrimSuffix(base, "/")+c.path,
		bytes.NewReader(c.request))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("reading the response: %w", err)
	}
	switch {
	case resp.ProtoMajor != 2:
		return fmt.Errorf("answered over %s, not HTTP/2", resp.Proto)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("status %d", resp.StatusCode)
	case resp.Header.Get("Grpc-Status") != "":
		return fmt.Errorf("trailers-only answer: grpc-status %s (%s)", resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message"))
	case !bytes.Equal(body, c.response):
		return fmt.Errorf("response body %q, want %q", body, c.response)
	case resp.Trailer.Get("Grpc-Status") != "0":
		return fmt.Errorf("trailer grpc-status %q, want \"0\" (trailers: %v)", resp.Trailer.Get("Grpc-Status"), resp.Trailer)
	}
	return nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:18081", "address to serve on")
	writeRequest := flag.String("write-request", "", "write the request body (one gRPC frame) to this file and exit")
	checkURL := flag.String("check", "", "make one unary call over h2c to this base URL, verify it and exit")
	callName := flag.String("call", "bench", "the call of -write-request and -check: bench (this backend's) "+
		"interop (grpc.testing.TestService/UnaryCall of grpc-go's interop server, answered with 22 bytes) "+
		"or interop-large (the same call answered with 64 KiB)")
	flag.Parse()
	c, ok := calls[*callName]
	if !ok {
		fmt.Fprintf(os.Stderr, "grpc-backend: -call %q: bench, interop or interop-large\n", *callName)
		os.Exit(2)
	}
	switch {
	case *writeRequest != "":
		if err := os.WriteFile(*writeRequest, c.request, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "grpc-backend:", err)
			os.Exit(1)
		}
	case *checkURL != "":
		if err := check(*checkURL, c); err != nil {
			fmt.Fprintf(os.Stderr, "grpc-backend: unary call through %s: %v\n", *checkURL, err)
			os.Exit(1)
		}
		fmt.Printf("ok: %s: status 200, response message, grpc-status 0\n", c.path)
	default:
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			fmt.Fprintln(os.Stderr, "grpc-backend:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "grpc-backend: serving h2c on", ln.Addr())
		fmt.Fprintln(os.Stderr, serve(ln))
		os.Exit(1)
	}
}
