package main

import (
	"bytes"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluicehq/sluice/service/certs/certstest"
)

// TestE2EHTTP2Streams: on the HTTP listener's HTTP/2 (TLS), a connection
// holds at most --http2-max-concurrent-streams streams without a body
// (the others are reset at once), each of them ends within --http-read-timeout,
// and a header list past --http-max-header-bytes is refused.
func TestE2EHTTP2Streams(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "sluice test CA")
	certFile, keyFile := ca.Server(t, "sluice", "127.0.0.1").Write(t, dir, "server")
	const streams, open = 10, 30
	p := start(t, nil, "--tls-cert", certFile, "--tls-key", keyFile, "--http2-max-concurrent-streams", "10", "--http-read-timeout", "1s")
	addr := strings.TrimPrefix(p.http, "http://")
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if proto := c.ConnectionState().NegotiatedProtocol; proto != "h2" {
		t.Fatalf("ALPN %q, want h2", proto)
	}
	c.Write([]byte(http2.ClientPreface))
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.WriteSettings()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	headers := func(id uint32, extra ...string) {
		buf.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":path", "/v1/check"}, {":authority", "sluice"}, {"content-type", "application/json"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		for i := 0; i+1 < len(extra); i += 2 {
			enc.WriteField(hpack.HeaderField{Name: extra[i], Value: extra[i+1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndHeaders: true})
	}
	// The settings are exchanged before the streams are opened, so that
	// the server's limit is the one in force.
	c.SetReadDeadline(time.Now().Add(time.Minute))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			fr.WriteSettingsAck()
			break
		}
	}
	for i := range open {
		headers(uint32(2*i + 1))
	}
	refused, ended := 0, map[uint32]bool{}
	deadline := time.Now().Add(time.Second + 10*time.Second)
	c.SetReadDeadline(deadline)
	for len(ended) < open {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("%d of %d streams without a body ended within --http-read-timeout 1s (+10s): %v", len(ended), open, err)
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			// REFUSED_STREAM, or PROTOCOL_ERROR once the client
			// acknowledged the server's limit.
			refused++
			ended[f.StreamID] = true
		case *http2.MetaHeadersFrame:
			ended[f.StreamID] = true
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		}
	}
	if refused < open-streams {
		t.Errorf("%d streams without a body on one connection: %d refused, want at least %d (--http2-max-concurrent-streams %d)", open, refused, open-streams, streams)
	}
	// A header list past --http-max-header-bytes (64 KiB).
	id := uint32(2*open + 1)
	headers(id, "x-big", strings.Repeat("b", 100<<10))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break // the connection closed: refused too
		}
		if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamID == id {
			if st := h.PseudoValue("status"); st != "431" {
				t.Errorf("a header list of 100 KiB: status %s, want 431", st)
			}
			break
		}
		if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == id {
			break
		}
	}
}
