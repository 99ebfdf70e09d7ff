package server

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestBodyRefusedUnread: a POST whose Content-Length is beyond the body
// limit, sent with Expect: 100-continue, is answered 413 from its headers:
// no 100 Continue asks for the body, so a client never sends it (nor
// races the server's close of a connection whose body it did not read).
func TestBodyRefusedUnread(t *testing.T) {
	s, _ := newTestServer(t)
	srv := httptest.NewServer(s)
	defer srv.Close()
	for _, path := range []string{"/json", "/v1/check", "/v1/acquire"} {
		t.Run(path, func(t *testing.T) {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// The deadline only ends a server that waits for the body.
			c.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", path, DefaultMaxBody+1)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer to the headers: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Errorf("answer to the headers of a body of %d bytes = %d, want 413 (before the body)", DefaultMaxBody+1, resp.StatusCode)
			}
		})
	}
}
