package main

import (
	"strings"
	"testing"
)

func TestByteSize(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr string
	}{
		{"0", 0, ""},
		{"1048576", 1 << 20, ""},
		{"64MiB", 64 << 20, ""},
		{"64 MiB", 64 << 20, ""},
		{"64mib", 64 << 20, ""},
		{"256MB", 256e6, ""},
		{"1GiB", 1 << 30, ""},
		{"2KB", 2000, ""},
		{"3KiB", 3072, ""},
		{"1TiB", 1 << 40, ""},
		{"512B", 512, ""},
		{"", 0, "want bytes"},
		{"MiB", 0, "want bytes"},
		{"-1", 0, "want bytes"},
		{"1.5GiB", 0, "unknown unit"},
		{"64XB", 0, "unknown unit"},
		{"64M", 0, "unknown unit"},
		{"20000000TiB", 0, "too large"},
		{"99999999999999999999", 0, "want bytes"},
	}
	for _, tt := range tests {
		var b byteSize
		err := b.Set(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Set(%q) = %v, want an error with %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || uint64(b) != tt.want {
			t.Errorf("Set(%q) = %d, %v, want %d", tt.in, uint64(b), err, tt.want)
		}
	}
}

func TestByteSizeString(t *testing.T) {
	tests := []struct {
		in   byteSize
		want string
	}{
		{0, "0"},
		{64 << 20, "64MiB"},
		{256e6, "256MB"},
		{1 << 30, "1GiB"},
		{1536, "1536B"},
		{1000, "1KB"},
		{1<<20 + 1, "1048577B"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("byteSize(%d).String() = %q, want %q", uint64(tt.in), got, tt.want)
		}
		var b byteSize
		if err := b.Set(tt.in.String()); err != nil || b != tt.in {
			t.Errorf("Set(%q) = %d, %v, want %d (round trip)", tt.in.String(), uint64(b), err, uint64(tt.in))
		}
	}
}
