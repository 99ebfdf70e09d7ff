package httplimit_test

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// A small RFC 8941 parser for List fields of Items with Parameters (no
// inner lists, no decimals): enough to hold the draft-11 fields to their
// syntax, independently of the code that writes them.

type sfToken string

type sfParam struct {
	Key   string
	Value any // int64, string, sfToken, []byte, bool
}

type sfItem struct {
	Value  any
	Params []sfParam
}

func (it sfItem) param(key string) (any, bool) {
	for _, p := range it.Params {
		if p.Key == key {
			return p.Value, true
		}
	}
	return nil, false
}

type sfParser struct {
	s string
	i int
}

func parseSFList(s string) ([]sfItem, error) {
	p := &sfParser{s: strings.Trim(s, " ")}
	var out []sfItem
	if p.s == "" {
		return nil, nil
	}
	for {
		if p.peek() == '(' {
			return nil, fmt.Errorf("inner lists are not expected at %d", p.i)
		}
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		out = append(out, it)
		p.ows()
		if p.i >= len(p.s) {
			return out, nil
		}
		if p.s[p.i] != ',' {
			return nil, fmt.Errorf("want ',' at %d in %q", p.i, p.s)
		}
		p.i++
		p.ows()
		if p.i >= len(p.s) {
			return nil, fmt.Errorf("trailing ',' in %q", p.s)
		}
	}
}

func (p *sfParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *sfParser) ows() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bare()
	if err != nil {
		return sfItem{}, err
	}
	it := sfItem{Value: v}
	for p.peek() == ';' {
		p.i++
		for p.peek() == ' ' {
			p.i++
		}
		k, err := p.key()
		if err != nil {
			return sfItem{}, err
		}
		var pv any = true
		if p.peek() == '=' {
			p.i++
			if pv, err = p.bare(); err != nil {
				return sfItem{}, err
			}
		}
		for _, q := range it.Params {
			if q.Key == k {
				return sfItem{}, fmt.Errorf("parameter %q twice", k)
			}
		}
		it.Params = append(it.Params, sfParam{k, pv})
	}
	return it, nil
}

func (p *sfParser) key() (string, error) {
	start := p.i
	c := p.peek()
	if !(c >= 'a' && c <= 'z' || c == '*') {
		return "", fmt.Errorf("bad key start %q at %d", c, p.i)
	}
	for p.i < len(p.s) {
		c := p.s[p.i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("_-.*", c) >= 0) {
			break
		}
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bare() (any, error) {
	c := p.peek()
	switch {
	case c == '-' || c >= '0' && c <= '9':
		start := p.i
		if c == '-' {
			p.i++
		}
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		if p.peek() == '.' {
			return nil, fmt.Errorf("decimals are not expected at %d", p.i)
		}
		digits := strings.TrimPrefix(p.s[start:p.i], "-")
		if len(digits) == 0 || len(digits) > 15 {
			return nil, fmt.Errorf("bad integer %q", p.s[start:p.i])
		}
		return strconv.ParseInt(p.s[start:p.i], 10, 64)
	case c == '"':
		var b strings.Builder
		for p.i++; p.i < len(p.s); p.i++ {
			c := p.s[p.i]
			switch {
			case c == '\\':
				p.i++
				if p.i >= len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
					return nil, fmt.Errorf("bad escape at %d", p.i)
				}
				b.WriteByte(p.s[p.i])
			case c == '"':
				p.i++
				return b.String(), nil
			case c < 0x20 || c > 0x7e:
				return nil, fmt.Errorf("bad string byte %#x", c)
			default:
				b.WriteByte(c)
			}
		}
		return nil, fmt.Errorf("unterminated string")
	case c == ':':
		end := strings.IndexByte(p.s[p.i+1:], ':')
		if end < 0 {
			return nil, fmt.Errorf("unterminated byte sequence")
		}
		raw := p.s[p.i+1 : p.i+1+end]
		p.i += end + 2
		return base64.StdEncoding.DecodeString(raw)
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return p.s[p.i-1] == '1', nil
		}
		return nil, fmt.Errorf("bad boolean")
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*':
		start := p.i
		for p.i < len(p.s) {
			c := p.s[p.i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0) {
				break
			}
			p.i++
		}
		return sfToken(p.s[start:p.i]), nil
	}
	return nil, fmt.Errorf("unexpected %q at %d", c, p.i)
}
