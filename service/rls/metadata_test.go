package rls

import (
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/service/engine"
)

// mustStruct is m as a structpb.Struct.
func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDynamicMetadata(t *testing.T) {
	s, _ := newService(t, withService(WithDynamicMetadata(true)))
	override := &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_HOUR}
	withHits := desc("key1", "a")
	withHits.HitsAddend = wrapperspb.UInt64(2)
	withLimit := desc("key1", "b")
	withLimit.Limit = override

	// The quota descriptor (1 a minute): its first hit is within, its
	// second over, a violation that does not deny.
	call(t, s, req(desc("quota", "q")))
	r := req(desc("quota", "q"), withHits, withLimit, desc("unmatched", "x"))
	r.HitsAddend = 1
	got := call(t, s, r)
	if got.OverallCode != ok {
		t.Fatalf("overall %v, want OK (quota mode does not deny)", got.OverallCode)
	}
	want := mustStruct(t, map[string]any{
		"domain": "test",
		"descriptors": []any{
			map[string]any{"entries": []any{"quota=q"}},
			map[string]any{"entries": []any{"key1=a"}, "hitsAddend": 2.0},
			map[string]any{"entries": []any{"key1=b"}, "limit": override.String()},
			map[string]any{"entries": []any{"unmatched=x"}},
		},
		"hitsAddend":          1.0,
		"quotaModeViolations": []any{0.0},
		"quotaModeEnabled":    true,
	})
	if diff := cmp.Diff(want, got.DynamicMetadata, protocmp.Transform()); diff != "" {
		t.Errorf("dynamic_metadata (-want +got):\n%s", diff)
	}

	// No quota_mode limit, no hits_addend: neither key, quotaModeEnabled
	// false.
	got = call(t, s, req(desc("key1", "c")))
	want = mustStruct(t, map[string]any{
		"domain":           "test",
		"descriptors":      []any{map[string]any{"entries": []any{"key1=c"}}},
		"quotaModeEnabled": false,
	})
	if diff := cmp.Diff(want, got.DynamicMetadata, protocmp.Transform()); diff != "" {
		t.Errorf("dynamic_metadata (-want +got):\n%s", diff)
	}
}

// TestDynamicMetadataGlobalQuotaMode: with the service-wide quota mode,
// violations are listed, and quotaModeEnabled tells only of the limits'
// own quota_mode.
func TestDynamicMetadataGlobalQuotaMode(t *testing.T) {
	s, _ := newService(t, withService(WithDynamicMetadata(true)), withEngine(engine.WithQuotaMode(true)))
	for range 20 {
		call(t, s, req(desc("key1", "g")))
	}
	got := call(t, s, req(desc("key1", "g")))
	f := got.DynamicMetadata.GetFields()
	if v := f["quotaModeViolations"].GetListValue().GetValues(); len(v) != 1 || v[0].GetNumberValue() != 0 {
		t.Errorf("quotaModeViolations = %v, want [0]", f["quotaModeViolations"])
	}
	if f["quotaModeEnabled"].GetBoolValue() {
		t.Errorf("quotaModeEnabled true without a quota_mode limit")
	}
}

func TestDynamicMetadataOff(t *testing.T) {
	s, _ := newService(t)
	if got := call(t, s, req(desc("key1", "a"))); got.DynamicMetadata != nil {
		t.Errorf("dynamic_metadata %v without WithDynamicMetadata", got.DynamicMetadata)
	}
}
