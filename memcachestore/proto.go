package memcachestore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
)

// The text protocol, as much of it as the store speaks: get, gets, add,
// cas, incr, decr, delete and version. Every command is written whole, in
// one write, and its reply read whole, before the connection serves another;
// a connection that fails or reads a reply it does not expect is closed,
// never reused.

// Bounds of what the store reads from a server.
const (
	// maxLine is the longest reply line: a VALUE line of a 250-byte name
	// with its flags, size and CAS unique is about 300 bytes.
	maxLine = 1024
	// maxValue is the largest value the store reads: its states are at
	// most about 60 bytes. A larger value is not a state of this store.
	maxValue = 128
)

// ServerError is an error reply of a server: ERROR, CLIENT_ERROR or
// SERVER_ERROR (for example "SERVER_ERROR out of memory storing object"
// from a memcached started with -M). The call made no decision.
type ServerError struct {
	Addr  string // the server's address
	Reply string // the reply line, without its line end
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("memcachestore: %s answered %q", e.Addr, e.Reply)
}

// errProtocol reports a reply the store does not expect: the connection
// is closed.
var errProtocol = errors.New("memcachestore: unexpected reply")

// storeResult is the outcome of add or cas.
type storeResult uint8

const (
	stored    storeResult = iota // STORED
	notStored                    // NOT_STORED (add: the item exists)
	exists                       // EXISTS (cas: the item changed since gets)
	notFound                     // NOT_FOUND (cas: the item is gone)
)

// conn is one connection to a server, used by one call at a time.
type conn struct {
	nc     net.Conn
	r      *bufio.Reader
	out    []byte // the command being written
	sv     *server
	reused bool               // taken from the idle list: it may have been closed by the server since
	cmds   int                // commands sent since it was taken
	stop   func() bool        // stops the call's cancellation hook (nil: none)
	broken bool               // a failure left the stream in an unknown state: close, never reuse
	val    [maxValue + 2]byte // the value of the last get, and its "\r\n"
}

// maxCommand is the longest command the store writes: a cas of a
// 250-byte name and a state.
const maxCommand = 512

func newConn(nc net.Conn, sv *server) *conn {
	return &conn{nc: nc, r: bufio.NewReaderSize(nc, maxLine), out: make([]byte, 0, maxCommand), sv: sv}
}

// send writes the command in c.out (which it copies into no other
// buffer: the names it holds never leave the call) in one write.
func (c *conn) send() error {
	c.cmds++
	_, err := c.nc.Write(c.out)
	return err
}

// stale reports whether err, the failure of the first command on a reused
// connection, says that the server had closed it before the command was
// sent (a restart, memcached's idle_timeout): the command may then be
// sent again on a new connection, since no server took it. (A server that
// crashed while taking it lost its items with it.) A timeout is never
// stale: a paused server may still take the command.
func (c *conn) stale(err error) bool {
	return c.reused && c.cmds == 1 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE))
}

// line reads one reply line, without its "\r\n". The slice is valid until
// the next read.
func (c *conn) line() ([]byte, error) {
	b, err := c.r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: a reply line longer than %d bytes", errProtocol, maxLine)
		}
		return nil, err
	}
	if len(b) < 2 || b[len(b)-2] != '\r' {
		return nil, fmt.Errorf("%w: a line not ended by \\r\\n", errProtocol)
	}
	return b[:len(b)-2], nil
}

// replyError returns the error of an error reply line, or nil.
func (c *conn) replyError(l []byte) error {
	if bytes.Equal(l, []byte("ERROR")) || bytes.HasPrefix(l, []byte("CLIENT_ERROR")) || bytes.HasPrefix(l, []byte("SERVER_ERROR")) {
		return &ServerError{Addr: c.sv.addr, Reply: string(l)}
	}
	return nil
}

func (c *conn) unexpected(l []byte) error {
	if err := c.replyError(l); err != nil {
		return err
	}
	return fmt.Errorf("%w %.64q", errProtocol, l)
}

// get sends get (or gets, with cas) for name and returns the value, valid
// until the next command, and its CAS unique (gets only).
func (c *conn) get(name []byte, cas bool) (val []byte, unique uint64, found bool, err error) {
	if cas {
		c.out = append(c.out[:0], "gets "...)
	} else {
		c.out = append(c.out[:0], "get "...)
	}
	c.out = append(append(c.out, name...), "\r\n"...)
	if err := c.send(); err != nil {
		return nil, 0, false, err
	}
	l, err := c.line()
	if err != nil {
		return nil, 0, false, err
	}
	if bytes.Equal(l, []byte("END")) {
		return nil, 0, false, nil
	}
	// VALUE <name> <flags> <bytes>[ <cas unique>]
	rest, ok := bytes.CutPrefix(l, []byte("VALUE "))
	if !ok {
		return nil, 0, false, c.unexpected(l)
	}
	got, rest, _ := bytes.Cut(rest, []byte(" "))
	_, rest, _ = bytes.Cut(rest, []byte(" ")) // flags
	size, rest, _ := bytes.Cut(rest, []byte(" "))
	if !bytes.Equal(got, name) {
		return nil, 0, false, fmt.Errorf("%w: VALUE of %.64q for a get of %.64q", errProtocol, got, string(name))
	}
	size64, ok := atou(size)
	switch {
	case !ok:
		return nil, 0, false, fmt.Errorf("%w: VALUE line %.100q", errProtocol, l)
	case size64 > maxValue:
		c.broken = true // the value is left unread: the stream is lost
		return nil, 0, false, &ValueError{Name: string(name), Reason: fmt.Sprintf("%d bytes, more than a state's %d", size64, maxValue)}
	}
	n := int(size64)
	if cas {
		if unique, ok = atou(rest); !ok {
			return nil, 0, false, fmt.Errorf("%w: VALUE line %.100q without a CAS unique", errProtocol, l)
		}
	}
	// The value and its "\r\n", then END.
	data := c.val[:n+2]
	if _, err := io.ReadFull(c.r, data); err != nil {
		return nil, 0, false, err
	}
	if data[n] != '\r' || data[n+1] != '\n' {
		return nil, 0, false, fmt.Errorf("%w: a value not ended by \\r\\n", errProtocol)
	}
	if l, err = c.line(); err != nil {
		return nil, 0, false, err
	}
	if !bytes.Equal(l, []byte("END")) {
		return nil, 0, false, c.unexpected(l)
	}
	return data[:n], unique, true, nil
}

// store sends add (unique 0) or cas (unique > 0) of val under name with
// exptime, and returns the outcome.
func (c *conn) store(name, val []byte, exptime int64, unique uint64) (storeResult, error) {
	if unique == 0 {
		c.out = append(c.out[:0], "add "...)
	} else {
		c.out = append(c.out[:0], "cas "...)
	}
	c.out = append(append(c.out, name...), " 0 "...)
	c.out = strconv.AppendInt(c.out, exptime, 10)
	c.out = strconv.AppendInt(append(c.out, ' '), int64(len(val)), 10)
	if unique != 0 {
		c.out = strconv.AppendUint(append(c.out, ' '), unique, 10)
	}
	c.out = append(append(append(c.out, "\r\n"...), val...), "\r\n"...)
	if err := c.send(); err != nil {
		return 0, err
	}
	l, err := c.line()
	if err != nil {
		return 0, err
	}
	switch string(l) { // no allocation: a conversion compared at once
	case "STORED":
		return stored, nil
	case "NOT_STORED":
		return notStored, nil
	case "EXISTS":
		return exists, nil
	case "NOT_FOUND":
		return notFound, nil
	}
	return 0, c.unexpected(l)
}

// incr sends incr (or decr, with down) of delta to name and returns the
// new value; found is false when the item does not exist. memcached's incr
// wraps at 2^64 and its decr stops at 0.
func (c *conn) incr(name []byte, delta uint64, down bool) (v uint64, found bool, err error) {
	if down {
		c.out = append(c.out[:0], "decr "...)
	} else {
		c.out = append(c.out[:0], "incr "...)
	}
	c.out = strconv.AppendUint(append(append(c.out, name...), ' '), delta, 10)
	c.out = append(c.out, "\r\n"...)
	if err := c.send(); err != nil {
		return 0, false, err
	}
	l, err := c.line()
	if err != nil {
		return 0, false, err
	}
	if string(l) == "NOT_FOUND" {
		return 0, false, nil
	}
	if v, ok := atou(l); ok {
		return v, true, nil
	}
	return 0, false, c.unexpected(l)
}

// del sends delete of name; a missing item is no error.
func (c *conn) del(name []byte) error {
	c.out = append(append(append(c.out[:0], "delete "...), name...), "\r\n"...)
	if err := c.send(); err != nil {
		return err
	}
	l, err := c.line()
	if err != nil {
		return err
	}
	if string(l) == "DELETED" || string(l) == "NOT_FOUND" {
		return nil
	}
	return c.unexpected(l)
}

// version sends version: the cheapest command, for Ping.
func (c *conn) version() error {
	c.out = append(c.out[:0], "version\r\n"...)
	if err := c.send(); err != nil {
		return err
	}
	l, err := c.line()
	if err != nil {
		return err
	}
	if bytes.HasPrefix(l, []byte("VERSION ")) {
		return nil
	}
	return c.unexpected(l)
}

// atou parses a decimal unsigned integer that fits in a uint64, as the
// server writes them. memcached pads a value that decr shortened with
// spaces: trailing spaces are skipped.
func atou(b []byte) (uint64, bool) {
	b = bytes.TrimRight(b, " ")
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		d := uint64(ch - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
