package tracing

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/service/tracing/otlptest"
)

// TestServiceNamespaceAndInstance: ServiceNamespace and ServiceInstanceID
// set the resource's service.namespace and service.instance.id, over the
// same attributes in OTEL_RESOURCE_ATTRIBUTES; that variable still sets
// the others, and these two when the Config leaves them empty.
func TestServiceNamespaceAndInstance(t *testing.T) {
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "service.namespace=from-env,service.instance.id=env-1,deployment.environment=prod")
	t.Setenv("OTEL_SERVICE_NAME", "")
	for _, tc := range []struct {
		ns, id         string
		wantNS, wantID string
	}{
		{"edge", "pod-7", "edge", "pod-7"},
		{"", "", "from-env", "env-1"},
		{"edge", "", "edge", "env-1"},
	} {
		r := otlptest.Start(t)
		p, err := Start(context.Background(), Config{Endpoint: "http://" + r.Addr, Protocol: ProtocolGRPC, ServiceName: "svc",
			ServiceNamespace: tc.ns, ServiceInstanceID: tc.id, SampleRatio: 1, Lookup: env()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, span := p.Tracer.Start(context.Background(), "probe")
		span.End()
		if err := p.Shutdown(context.Background()); err != nil { // flushes: the span is received on return
			t.Fatal(err)
		}
		spans := r.Spans()
		if len(spans) != 1 {
			t.Fatalf("%+v: %d spans received, want 1", tc, len(spans))
		}
		res := spans[0].Resource
		if res["service.namespace"] != tc.wantNS || res["service.instance.id"] != tc.wantID ||
			res["service.name"] != "svc" || res["deployment.environment"] != "prod" {
			t.Errorf("%+v: resource %v; want service.namespace %s, service.instance.id %s, service.name svc, deployment.environment prod",
				tc, res, tc.wantNS, tc.wantID)
		}
	}
}
