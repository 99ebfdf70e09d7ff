package redisstore

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// escape makes a user key safe inside a hash tag: '%', '{' and '}' become
// %25, %7B and %7D. It is injective, so two different keys never share a
// name, and the result holds no brace, so it can neither end the hash tag
// early nor move the key to another Cluster slot.
func escape(s string) string {
	if !strings.ContainsAny(s, "%{}") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

var algLetter = [...]byte{
	sluice.FixedWindow:   'f',
	sluice.SlidingLog:    'l',
	sluice.SlidingWindow: 's',
	sluice.TokenBucket:   'b', // 't' held a deficit; 'b' holds a TAT (algo.Bucket)
	sluice.GCRA:          'g',
}

// appendSuffix appends the algorithm and period of a state: the algorithm's
// letter and the period in base 36, in seconds when it is a whole number
// of seconds (the letter in upper case: 1m is "G1o" for GCRA) and else in
// µs (lower case: 1500ms is "gw5ls"). Short, since key names count in
// every key's memory.
func appendSuffix(b []byte, lim sluice.Limit) []byte {
	l := algLetter[lim.Algorithm]
	if lim.Period%time.Second == 0 {
		return strconv.AppendInt(append(b, l-'a'+'A'), int64(lim.Period/time.Second), 36)
	}
	return strconv.AppendInt(append(b, l), lim.Period.Microseconds(), 36)
}

// redisKey is the name of the state of (key, algorithm, period):
// <prefix>{<escaped key>}<suffix>, with WithSlotKey
// <prefix>{<escaped slot key>}<escaped key>}<suffix>, or rl:<key> for a
// sliding log in the millisecond layout (WithMillisecondLayout).
func (s *Store) redisKey(key string, lim sluice.Limit) string {
	if s.msLayout && lim.Algorithm == sluice.SlidingLog {
		return "rl:" + key
	}
	e := escape(key)
	var sk string
	if s.slotKey != nil {
		sk = escape(s.slotKey(key))
	}
	// One allocation: the name is built in a strings.Builder's buffer,
	// which String returns without copying.
	var b strings.Builder
	b.Grow(len(s.prefix) + len(sk) + len(e) + 16)
	b.WriteString(s.prefix)
	b.WriteByte('{')
	if s.slotKey != nil {
		// <prefix>{<escaped slot key>}<escaped key>}<suffix>: the second
		// brace ends the key as the first does in the default layout.
		b.WriteString(sk)
		b.WriteByte('}')
	}
	b.WriteString(e)
	b.WriteByte('}')
	var suf [16]byte
	b.Write(appendSuffix(suf[:0], lim))
	return b.String()
}

// slot is the Redis Cluster hash slot of a key: CRC16 (XMODEM) of its hash
// tag (the text between the first '{' and the next '}', when not empty) or
// of the whole key, modulo 16384.
func slot(key string) uint16 { return crc16(hashTag(key)) & 16383 }

// hashTag is the part of a key that Redis Cluster (and a go-redis Ring)
// hashes: the text between the first '{' and the next '}', when not empty,
// or else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
