package main

import (
	"strings"
	"testing"
)

func TestMemcacheFlagsValidate(t *testing.T) {
	tests := []struct {
		args []string
		want string // "" valid
	}{
		{[]string{"--memcache", "127.0.0.1:11211"}, ""},
		{[]string{"--memcache", "a:1,b:2", "--memcache-max-idle-conns", "16", "--tiered"}, ""},
		{[]string{"--memcache-srv", "_mc._tcp.example", "--memcache-srv-refresh", "30s"}, ""},
		{[]string{"--memcache", "a:1", "--memcache-tls", "--memcache-tls-ca", "/ca.pem"}, ""},
		{[]string{"--memcache", "a:1", "--redis", "redis://r:1"}, "--redis and --memcache are alternatives"},
		{[]string{"--memcache", "a:1", "--memcache-srv", "_mc._tcp.example"}, "--memcache and --memcache-srv are alternatives"},
		{[]string{"--memcache-tls"}, "--memcache-* need --memcache or --memcache-srv"},
		{[]string{"--memcache", "a:1", "--memcache-srv-refresh", "1m"}, "--memcache-srv-refresh needs --memcache-srv"},
		{[]string{"--memcache", "a:1", "--memcache-tls-ca", "/ca.pem"}, "--memcache-tls-* need --memcache-tls"},
		{[]string{"--memcache", "a:1", "--memcache-tls", "--memcache-tls-cert", "/c.pem"}, "go together"},
		{[]string{"--memcache", "a:1", "--memcache-max-idle-conns", "0"}, "--memcache-max-idle-conns 0"},
		{[]string{"--memcache", "a:1", "--failure-mode", "open"}, "--failure-mode open needs --replicas"},
		{[]string{"--memcache", "a:1", "--redis-key-prefix", strings.Repeat("p", 65)}, "at most 64 with --memcache"},
		{[]string{"--memcache", "a:1", "--redis-persecond", "redis://r:1"}, "--redis-persecond needs --redis"},
		{[]string{"--redis", "redis://r:1", "--redis-persecond", "redis://s:1", "--redis-persecond-timeout", "1s"}, ""},
		{[]string{"--redis", "redis://r:1", "--redis-persecond-timeout", "1s"}, "with --redis-persecond"},
	}
	for _, tt := range tests {
		f, out, code := parseRefEnv(t, nil, tt.args...)
		if code != -1 {
			t.Fatalf("%v: parse code %d, %s", tt.args, code, out)
		}
		err := f.validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%v: validate: %v", tt.args, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%v: validate = %v, want an error with %q", tt.args, err, tt.want)
		}
	}
}
