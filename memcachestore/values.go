package memcachestore

import (
	"bytes"
	"fmt"
	"math"
	"strconv"

	"github.com/sluicehq/sluice/internal/algo"
)

// The values of the states, decimal text (as memcached's incr and decr
// read and write them):
//
//	fixed window    the count of the window the item's name holds
//	sliding window  "start:prev:cur", start in µs since the epoch
//	token bucket    as GCRA: the time the bucket is full again
//	GCRA            the theoretical arrival time in µs, or "at:frac"
//	                (frac < the reduced Rate, in 1/Rate of a µs)

// ValueError reports an item whose value is not a state of the store: an
// item of another application under the store's Prefix, or one damaged.
// The call made no decision; the item is left as it is.
type ValueError struct {
	Name   string // the item's name
	Reason string
}

func (e *ValueError) Error() string {
	return fmt.Sprintf("memcachestore: item %.80q is not a state: %s", e.Name, e.Reason)
}

// parseInt parses a decimal int64 (memcached pads a value decr shortened
// with spaces: they are skipped).
func parseInt(b []byte) (int64, bool) {
	b = bytes.TrimRight(b, " ")
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	u, ok := atou(b)
	if !ok || u > math.MaxInt64 {
		return 0, false
	}
	if neg {
		return -int64(u), true
	}
	return int64(u), true
}

// parseInts parses up to len(dst) decimal integers separated by ':' into
// dst and returns how many there were.
func parseInts(b []byte, dst []int64) (int, bool) {
	n := 0
	for {
		field, rest, more := bytes.Cut(b, []byte(":"))
		if n == len(dst) {
			return n, false
		}
		v, ok := parseInt(field)
		if !ok {
			return n, false
		}
		dst[n] = v
		n++
		if !more {
			return n, true
		}
		b = rest
	}
}

// decodeCount reads a fixed window's count.
func decodeCount(v []byte) (int64, bool) {
	c, ok := parseInt(v)
	return c, ok && c >= 0
}

func decodeCounter(v []byte) (algo.Counter, bool) {
	var f [3]int64
	n, ok := parseInts(v, f[:])
	if !ok || n != 3 || f[1] < 0 || f[2] < 0 {
		return algo.Counter{}, false
	}
	return algo.Counter{Start: f[0], Prev: f[1], Cur: f[2]}, true
}

func decodeTAT(v []byte) (algo.TAT, bool) {
	var f [2]int64
	n, ok := parseInts(v, f[:])
	if !ok || n < 1 || f[1] < 0 {
		return algo.TAT{}, false
	}
	return algo.TAT{At: f[0], Frac: f[1]}, true
}

func appendCounter(b []byte, c algo.Counter) []byte {
	b = strconv.AppendInt(b, c.Start, 10)
	b = strconv.AppendInt(append(b, ':'), c.Prev, 10)
	return strconv.AppendInt(append(b, ':'), c.Cur, 10)
}

func appendTAT(b []byte, t algo.TAT) []byte {
	b = strconv.AppendInt(b, t.At, 10)
	if t.Frac != 0 {
		b = strconv.AppendInt(append(b, ':'), t.Frac, 10)
	}
	return b
}
