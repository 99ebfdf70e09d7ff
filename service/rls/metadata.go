package rls

import (
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/service/engine"
)

// WithDynamicMetadata makes every response carry dynamic_metadata that
// describes the request and its quota-mode outcome, as the reference does
// with RESPONSE_DYNAMIC_METADATA (its version that `make compat` builds):
//
//   - domain: the request's domain;
//   - descriptors: one struct per descriptor, with entries (a list of
//     "key=value"), and, when the descriptor sets them, limit (its
//     override in protobuf's text form) and hitsAddend;
//   - hitsAddend: the request's hits_addend, when not 0;
//   - quotaModeViolations: the indexes of the quota_mode descriptors over
//     their limit, when there are any;
//   - quotaModeEnabled: whether a descriptor's limit has quota_mode
//     itself (the service-wide --quota-mode does not set it).
//
// Envoy's filter puts it in the request's dynamic metadata under
// envoy.filters.http.ratelimit, for access logs and later filters.
func WithDynamicMetadata(on bool) Option { return func(s *Service) { s.metadata = on } }

// dynamicMetadata is the response's dynamic_metadata for req and res.
func dynamicMetadata(req *pb.RateLimitRequest, res *engine.Result) *structpb.Struct {
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		if d == nil {
			continue
		}
		entries := make([]*structpb.Value, len(d.GetEntries()))
		for i, e := range d.GetEntries() {
			entries[i] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if o := d.GetLimit(); o != nil {
			f["limit"] = structpb.NewStringValue(o.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	var over []*structpb.Value
	enabled := false
	for i := range res.Statuses {
		st := &res.Statuses[i]
		if st.QuotaOver {
			over = append(over, structpb.NewNumberValue(float64(i)))
		}
		if st.Rule != nil && st.Rule.QuotaMode {
			enabled = true
		}
	}
	if len(over) > 0 {
		fields["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: over})
	}
	fields["quotaModeEnabled"] = structpb.NewBoolValue(enabled)
	return &structpb.Struct{Fields: fields}
}
