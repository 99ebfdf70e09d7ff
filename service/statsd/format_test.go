package statsd

import (
	"strings"
	"testing"
)

func TestPlain(t *testing.T) {
	var p Plain
	tests := []struct {
		give []byte
		want string
	}{
		{p.Counter(nil, "ratelimit.service.rate_limit.dom.k1.total_hits", 7), "ratelimit.service.rate_limit.dom.k1.total_hits:7|c\n"},
		{p.Gauge(nil, "ratelimit.go.sys", 0), "ratelimit.go.sys:0|g\n"},
		{p.Timer(nil, "ratelimit_server.ShouldRateLimit.response_time", 3), "ratelimit_server.ShouldRateLimit.response_time:3|ms\n"},
		{p.Timer(nil, "t", 1.5), "t:1.500000|ms\n"},
		{p.Timer(nil, "t", -1), "t:-1.000000|ms\n"},
		{p.Counter(nil, "a.b.__env=prod", 1), "a.b.__env=prod:1|c\n"},
	}
	for _, tt := range tests {
		if string(tt.give) != tt.want {
			t.Errorf("got %q, want %q", tt.give, tt.want)
		}
	}
}

func TestDog(t *testing.T) {
	hits, err := NewMogrifier(`^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`, "ratelimit.service.rate_limit.$3", map[string]string{"domain": "$1", "descriptor": "$2"})
	if err != nil {
		t.Fatal(err)
	}
	dom, err := NewMogrifier(`^some\.original\.metric\.(.*)$`, "some.original.metric", map[string]string{"domain": "$1", "raw": "$9"})
	if err != nil {
		t.Fatal(err)
	}
	d := Dog{Mogrifiers: []Mogrifier{hits, dom}}
	tests := []struct {
		give []byte
		want string
	}{
		{Dog{}.Counter(nil, "ratelimit.service.config_load_success", 1), "ratelimit.service.config_load_success:1|c\n"},
		{Dog{}.Gauge(nil, "ratelimit.go.alloc", 2251904), "ratelimit.go.alloc:2251904|g\n"},
		{Dog{}.Timer(nil, "ratelimit_server.ShouldRateLimit.response_time", 3), "ratelimit_server.ShouldRateLimit.response_time:3.000000|ms\n"},
		// Tags serialized in the name come out into |#, in their order.
		{Dog{}.Counter(nil, "ratelimit.service.config_load_success.__a=1.__b=x_y", 1), "ratelimit.service.config_load_success:1|c|#a:1,b:x_y\n"},
		{Dog{}.Counter(nil, "n.__bad.__k=v", 1), "n:1|c|#k:v\n"},
		// The first mogrifier that matches; its tags by key, after the
		// serialized ones.
		{d.Counter(nil, "ratelimit.service.rate_limit.dom.k3_v3.k4.total_hits.__env=prod", 4),
			"ratelimit.service.rate_limit.total_hits:4|c|#env:prod,descriptor:k3_v3.k4,domain:dom\n"},
		// A reference past the groups stays as it is.
		{d.Gauge(nil, "some.original.metric.TAG", 1), "some.original.metric:1|g|#domain:TAG,raw:$9\n"},
		{d.Counter(nil, "no.match", 1), "no.match:1|c\n"},
	}
	for _, tt := range tests {
		if string(tt.give) != tt.want {
			t.Errorf("got %q, want %q", tt.give, tt.want)
		}
	}
}

func TestNewMogrifierErrors(t *testing.T) {
	tests := []struct {
		pattern, name string
		tags          map[string]string
		want          string
	}{
		{"", "n", nil, "no pattern"},
		{"(", "n", nil, "pattern"},
		{"x", "", nil, "no name"},
		{"x", "n", map[string]string{"k": ""}, "want a key and a value"},
		{"x", "n", map[string]string{"": "v"}, "want a key and a value"},
	}
	for _, tt := range tests {
		_, err := NewMogrifier(tt.pattern, tt.name, tt.tags)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewMogrifier(%q, %q, %v) = %v, want an error with %q", tt.pattern, tt.name, tt.tags, err, tt.want)
		}
	}
}
