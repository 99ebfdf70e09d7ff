package xds

import (
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestDigestOf: a response's digest ignores the order of its resources
// and its nonce, not its version nor a resource's content.
func TestDigestOf(t *testing.T) {
	a := &anypb.Any{TypeUrl: TypeURL, Value: []byte("a")}
	b := &anypb.Any{TypeUrl: TypeURL, Value: []byte("b")}
	r := func(version, nonce string, res ...*anypb.Any) [32]byte {
		return digestOf(&discovery.DiscoveryResponse{TypeUrl: TypeURL, VersionInfo: version, Nonce: nonce, Resources: res})
	}
	if r("v1", "1", a, b) != r("v1", "2", b, a) {
		t.Error("the order of resources or the nonce changed the digest")
	}
	for _, other := range [][32]byte{r("v2", "1", a, b), r("v1", "1", a), r("v1", "1", a, a), r("v1", "1", &anypb.Any{TypeUrl: TypeURL, Value: []byte("ab")})} {
		if other == r("v1", "1", a, b) {
			t.Error("two different responses have one digest")
		}
	}
}
