package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// ErrNil is Do's error for a nil reply (a missing key, for example).
var ErrNil = errors.New("redistest: nil reply")

// ReplyError is an error reply from Redis, such as "NOSCRIPT No matching
// script" or "WRONGTYPE ...".
type ReplyError struct{ Msg string }

func (e *ReplyError) Error() string { return "redis: " + e.Msg }

// conn is a minimal RESP2 client: one command at a time, for test set-up
// and inspection only.
type conn struct {
	nc net.Conn
	r  *bufio.Reader
}

func dial(addr string, timeout time.Duration) (*conn, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	if err := nc.SetDeadline(time.Now().Add(timeout)); err != nil {
		nc.Close()
		return nil, err
	}
	return &conn{nc: nc, r: bufio.NewReader(nc)}, nil
}

func (c *conn) close() { c.nc.Close() }

func (c *conn) do(args ...string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("redistest: empty command")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c.nc, b.String()); err != nil {
		return "", err
	}
	lines, err := c.read()
	if err != nil {
		return "", err
	}
	return strings.Join(lines, "\n"), nil
}

// read reads one reply; arrays are flattened into their elements.
func (c *conn) read() ([]string, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, fmt.Errorf("redistest: empty reply line")
	}
	kind, rest := line[0], line[1:]
	switch kind {
	case '+', ':':
		return []string{rest}, nil
	case '-':
		return nil, &ReplyError{Msg: rest}
	case '$':
		n, err := length(rest, "bulk")
		if err != nil {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, err
		}
		return []string{string(buf[:n])}, nil
	case '*':
		n, err := length(rest, "array")
		if err != nil {
			return nil, err
		}
		var out []string
		var firstErr error
		for range n {
			el, err := c.read()
			switch {
			case errors.Is(err, ErrNil):
				out = append(out, "")
			case err != nil:
				var re *ReplyError
				if !errors.As(err, &re) {
					return nil, err
				}
				if firstErr == nil {
					firstErr = err
				}
			default:
				out = append(out, el...)
			}
		}
		return out, firstErr
	}
	return nil, fmt.Errorf("redistest: unknown reply type %q", line)
}

// length parses the length of a bulk string or an array: ErrNil for a
// negative one (a nil reply).
func length(rest, what string) (int, error) {
	n, err := strconv.Atoi(rest)
	if err != nil {
		return 0, fmt.Errorf("redistest: bad %s length %q", what, rest)
	}
	if n < 0 {
		return 0, ErrNil
	}
	return n, nil
}
