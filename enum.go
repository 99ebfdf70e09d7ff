package sluice

import (
	"fmt"
	"strconv"
)

// enum is the configuration vocabulary of a small enumeration (Algorithm,
// FailureMode): its names by value, "" for a value that has none.
type enum[T ~uint8] struct {
	typ   string   // the Go type, and the Limit field errors name
	noun  string   // what a value is, in errors: "algorithm"
	names []string // by value
	want  string   // what parse accepts, for its error
}

func (e *enum[T]) valid(v T) bool { return int(v) < len(e.names) && e.names[v] != "" }

func (e *enum[T]) String(v T) string {
	if e.valid(v) {
		return e.names[v]
	}
	return e.typ + "(" + strconv.Itoa(int(v)) + ")"
}

func (e *enum[T]) parse(s string) (T, error) {
	for v, name := range e.names {
		if name != "" && name == s {
			return T(v), nil
		}
	}
	return 0, &LimitError{Field: e.typ, Reason: fmt.Sprintf("unknown %s %q (want %s)", e.noun, s, e.want)}
}

func (e *enum[T]) marshal(v T) ([]byte, error) {
	if !e.valid(v) {
		return nil, &LimitError{Field: e.typ, Reason: fmt.Sprintf("%s %d", e.noun, v)}
	}
	return []byte(e.names[v]), nil
}
