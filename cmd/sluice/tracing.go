package main

import (
	"flag"
	"fmt"

	"github.com/sluicehq/sluice/service/tracing"
)

// tracingFlags turn on OpenTelemetry tracing (--tracing-*); the OTEL_*
// variables configure the rest.
type tracingFlags struct {
	enabled     bool
	endpoint    string
	protocol    string
	serviceName string
	namespace   string
	instanceID  string
	sampleRatio float64
	keys        bool
}

func (g *tracingFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&g.enabled, "tracing", false, "export OpenTelemetry traces over OTLP (on too when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set); the OTEL_* variables configure the exporter")
	fs.StringVar(&g.endpoint, "tracing-endpoint", "", "the OTLP collector, a `URL` such as http://collector:4317 or host:port; turns tracing on (default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT)")
	fs.StringVar(&g.protocol, "tracing-protocol", "", "the OTLP `protocol`: grpc or http/protobuf (default: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL, else grpc)")
	fs.StringVar(&g.serviceName, "tracing-service-name", "", "the service.name of the spans (default sluice; OTEL_SERVICE_NAME wins over it)")
	fs.StringVar(&g.namespace, "tracing-service-namespace", "", "the service.namespace of the spans (wins over OTEL_RESOURCE_ATTRIBUTES)")
	fs.StringVar(&g.instanceID, "tracing-service-instance-id", "", "the service.instance.id of the spans (wins over OTEL_RESOURCE_ATTRIBUTES)")
	fs.Float64Var(&g.sampleRatio, "tracing-sample-ratio", -1, "the share of new traces sampled, 0 to 1, a caller's sampled flag kept (default -1: OTEL_TRACES_SAMPLER decides, else every trace)")
	fs.BoolVar(&g.keys, "tracing-keys", false, "add the descriptors' entries and the counters' keys to the spans (callers' data)")
}

func (g *tracingFlags) validate() error {
	if g.sampleRatio != -1 && !(g.sampleRatio >= 0 && g.sampleRatio <= 1) {
		return fmt.Errorf("--tracing-sample-ratio %v: want 0 to 1 (or -1 for OTEL_TRACES_SAMPLER)", g.sampleRatio)
	}
	switch g.protocol {
	case "", tracing.ProtocolGRPC, tracing.ProtocolHTTP:
	default:
		return fmt.Errorf("--tracing-protocol %q: want grpc or http/protobuf", g.protocol)
	}
	return nil
}

// config is the tracing configuration of the flags.
func (g *tracingFlags) config() tracing.Config {
	return tracing.Config{Enabled: g.enabled, Endpoint: g.endpoint, Protocol: g.protocol,
		ServiceName: g.serviceName, ServiceNamespace: g.namespace, ServiceInstanceID: g.instanceID, SampleRatio: g.sampleRatio, Keys: g.keys}
}
