package tracing

import (
	"context"
	"testing"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestOn(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		want bool
	}{
		{"nothing", Config{Lookup: env()}, false},
		{"other OTEL variables", Config{Lookup: env("OTEL_SERVICE_NAME", "x", "OTEL_TRACES_SAMPLER", "always_on")}, false},
		{"empty endpoint", Config{Lookup: env("OTEL_EXPORTER_OTLP_ENDPOINT", " ")}, false},
		{"endpoint", Config{Lookup: env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317")}, true},
		{"traces endpoint", Config{Lookup: env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4317")}, true},
		{"flag", Config{Enabled: true, Lookup: env()}, true},
		{"flag endpoint", Config{Endpoint: "c:4317", Lookup: env()}, true},
		{"sdk disabled", Config{Enabled: true, Lookup: env("OTEL_SDK_DISABLED", "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317")}, false},
	} {
		if got := tc.c.On(); got != tc.want {
			t.Errorf("%s: On() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestProtocol(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
		bad  bool
	}{
		{Config{Lookup: env()}, ProtocolGRPC, false},
		{Config{Lookup: env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")}, ProtocolHTTP, false},
		{Config{Lookup: env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")}, ProtocolGRPC, false},
		{Config{Protocol: "grpc", Lookup: env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")}, ProtocolGRPC, false},
		{Config{Lookup: env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")}, "", true},
	} {
		got, err := tc.c.protocol()
		if got != tc.want || (err != nil) != tc.bad {
			t.Errorf("%+v: protocol() = %q, %v; want %q (error %v)", tc.c.Protocol, got, err, tc.want, tc.bad)
		}
	}
}

func TestStartOff(t *testing.T) {
	p, err := Start(context.Background(), Config{Lookup: env("OTEL_SERVICE_NAME", "x")}, nil)
	if p != nil || err != nil {
		t.Fatalf("Start with tracing off = %v, %v; want nil, nil", p, err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestStartBad(t *testing.T) {
	for _, c := range []Config{
		{Enabled: true, Protocol: "http/json", Lookup: env()},
		{Enabled: true, SampleRatio: 2, Lookup: env()},
	} {
		if p, err := Start(context.Background(), c, nil); err == nil {
			p.Shutdown(context.Background())
			t.Errorf("Start(%+v): no error", c)
		}
	}
}
