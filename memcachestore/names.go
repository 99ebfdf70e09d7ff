package memcachestore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// maxName is memcached's longest key, in bytes.
const maxName = 250

// hashHex is how many hex digits of a long key's SHA-256 its name keeps:
// 128 bits.
const hashHex = 32

// algLetter names a state's algorithm in its item name, as in redisstore.
var algLetter = [...]byte{
	sluice.FixedWindow:   'f',
	sluice.SlidingWindow: 's',
	sluice.TokenBucket:   'b',
	sluice.GCRA:          'g',
}

// appendSuffix appends what follows a key in its item name: the
// algorithm's letter and the period in base 36, in seconds with the
// letter in upper case when the period is whole seconds ("F1o" is a fixed
// window of a minute), else in µs ("gw5ls" is GCRA per 1.5s); for a fixed
// window, "." and the window's number (its start divided by the period)
// in base 36.
func appendSuffix(b []byte, lim sluice.Limit, window int64) []byte {
	l := algLetter[lim.Algorithm]
	if lim.Period%time.Second == 0 {
		b = strconv.AppendInt(append(b, l-'a'+'A'), int64(lim.Period/time.Second), 36)
	} else {
		b = strconv.AppendInt(append(b, l), lim.Period.Microseconds(), 36)
	}
	if lim.Algorithm == sluice.FixedWindow {
		b = strconv.AppendInt(append(b, '.'), window, 36)
	}
	return b
}

// escaped reports whether byte c of a key is escaped in its name: what
// memcached refuses in a key (a space, a control character, DEL) and '%',
// the escape itself.
func escaped(c byte) bool { return c <= ' ' || c == 0x7f || c == '%' }

// appendName appends the item name of key's state under lim, in the
// window of number window for a fixed window:
//
//	<prefix><escaped key>:<suffix>
//
// In the escaped key, each byte that memcached refuses in a key and '%'
// become %XX (hexadecimal, upper case): the escaping is injective, and
// the suffix holds no ':', so two different (key, algorithm, period,
// window) never share a name. When that name would be longer than the
// 250 bytes memcached allows, the escaped key is cut (never inside an
// escape) and followed by "%#" and 32 hexadecimal digits of the SHA-256
// of the whole key: "%#" never occurs in an escaped key, so a cut name
// never meets a whole one, and two long keys share a name only if their
// hashes share 128 bits.
func (s *Store) appendName(b []byte, key string, lim sluice.Limit, window int64) []byte {
	var sb [32]byte
	suffix := appendSuffix(sb[:0], lim, window)
	b = append(b, s.opts.Prefix...)
	budget := maxName - len(s.opts.Prefix) - 1 - len(suffix)
	if n := escapedLen(key); n <= budget {
		b = appendEscaped(b, key, n)
	} else {
		b = appendCut(b, key, budget-2-hashHex)
		sum := sha256.Sum256([]byte(key))
		b = append(b, '%', '#')
		b = hex.AppendEncode(b, sum[:hashHex/2])
	}
	b = append(b, ':')
	return append(b, suffix...)
}

// escapedLen is the length of key once escaped.
func escapedLen(key string) int {
	n := len(key)
	for i := 0; i < len(key); i++ {
		if escaped(key[i]) {
			n += 2
		}
	}
	return n
}

const upperHex = "0123456789ABCDEF"

// appendEscaped appends key escaped, n bytes long.
func appendEscaped(b []byte, key string, n int) []byte {
	if n == len(key) {
		return append(b, key...)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if escaped(c) {
			b = append(b, '%', upperHex[c>>4], upperHex[c&15])
			continue
		}
		b = append(b, c)
	}
	return b
}

// appendCut appends the longest start of key escaped that fits in room
// bytes, never cutting an escape.
func appendCut(b []byte, key string, room int) []byte {
	for i := 0; i < len(key); i++ {
		c := key[i]
		w := 1
		if escaped(c) {
			w = 3
		}
		if room < w {
			break
		}
		room -= w
		if w == 3 {
			b = append(b, '%', upperHex[c>>4], upperHex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return b
}

// appendReferenceName appends envoyproxy/ratelimit's name of a fixed
// window (Options.ReferenceKeys): the key (which, built as the reference
// builds it, ends with "_") followed by the window's start in Unix
// seconds. It reports a key that memcached would refuse as a
// *sluice.LimitError on Key.
func appendReferenceName(b []byte, key string, startSeconds int64) ([]byte, error) {
	b = append(b, key...)
	b = strconv.AppendInt(b, startSeconds, 10)
	if len(b) > maxName {
		return b, &sluice.LimitError{Field: "Key", Err: sluice.ErrInvalidKey,
			Reason: fmt.Sprintf("key of %d bytes: with ReferenceKeys, its item name %.40q... is %d bytes, more than memcached's %d", len(key), b, len(b), maxName)}
	}
	if !legalName(key) {
		return b, &sluice.LimitError{Field: "Key", Err: sluice.ErrInvalidKey,
			Reason: fmt.Sprintf("key %.64q holds a space or a control character, which memcached refuses in a key (ReferenceKeys keeps keys unescaped)", key)}
	}
	return b, nil
}
