package hostile

import (
	"bytes"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// utf8Class: /v1/check keys that are not valid UTF-8 (raw bytes in the
// JSON body, or escapes of lone surrogates), in groups whose keys a lenient
// decoder would turn into the same text. Each key gets a limit of 1 an
// hour: it is refused with a 400 naming the key, or admitted in a bucket of
// its own; a denial of a group's later key means two keys shared a bucket.
// On gRPC and /json, invalid UTF-8 in a descriptor value is refused.
var utf8Class = class{name: "utf8", run: runUTF8}

// utf8Groups: within a group, every key differs in its bytes.
var utf8Groups = []struct {
	name string
	keys []string // raw JSON string contents
}{
	{"invalid bytes", []string{"\xff", "\xfe", "\xef\xbf\xbd"}},
	{"truncated sequences", []string{"\xc3", "\xe2\x82", "\xf0\x9f\x98", "\xef\xbf\xbd"}},
	{"overlong encodings", []string{"\xc0\xaf", "\xc1\xbf", "/", "\xef\xbf\xbd\xef\xbf\xbd"}},
	{"surrogates encoded in UTF-8", []string{"\xed\xa0\x80", "\xed\xbf\xbf", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}},
	{"lone surrogate escapes", []string{`\ud800`, `\udfff`, `\ufffd`}},
}

func runUTF8(t *testing.T, h *harness) {
	cl := hostileClient(2 * time.Second)
	defer cl.CloseIdleConnections()
	check := func(rawKey string) (int, string, error) {
		body := `{"key":"` + rawKey + `","algorithm":"sliding_log","rate":1,"period":"1h"}`
		return statusOf(cl.Post(h.p.httpURL("/v1/check"), "application/json", strings.NewReader(body)))
	}
	// The control: one valid key twice shares its bucket, so a shared
	// bucket is seen.
	ctl := h.sameKey + "-control"
	if c1, b1, err1 := check(ctl); err1 != nil || c1 != 200 || !strings.Contains(b1, `"allowed":true`) {
		t.Fatalf("control key, first request: %d %s %v, want 200 allowed", c1, trim(b1), err1)
	}
	if c2, b2, err2 := check(ctl); err2 != nil || c2 != 200 || !strings.Contains(b2, `"allowed":false`) {
		t.Fatalf("control key, second request: %d %s %v, want 200 denied (1 an hour)", c2, trim(b2), err2)
	}
	for _, g := range utf8Groups {
		prefix := h.sameKey + "-" + strings.ReplaceAll(g.name, " ", "-") + "-"
		var admitted []string
		for _, k := range g.keys {
			code, body, err := check(prefix + k)
			switch {
			case err != nil:
				t.Errorf("%s: key %+q: no answer: %v", g.name, k, err)
			case code == 400 && namesAny(body, []string{"key"}):
			case code == 200 && strings.Contains(body, `"allowed":true`):
				admitted = append(admitted, k)
			case code == 200:
				t.Errorf("%s: key %+q was denied on its first request: it shares a bucket with one of %+q", g.name, k, admitted)
			default:
				t.Errorf("%s: key %+q: %d %s, want a 400 naming the key or a bucket of its own", g.name, k, code, trim(body))
			}
		}
	}

	// gRPC: a descriptor value of invalid UTF-8, sent as raw protobuf
	// (grpc-go's own client refuses to marshal it).
	msg, err := proto.Marshal(&pb.RateLimitRequest{Domain: "hostile", Descriptors: []*rlpb.RateLimitDescriptor{desc("probe", h.sameKey+"-XXXX")}})
	if err != nil {
		t.Fatal(err)
	}
	msg = bytes.Replace(msg, []byte("XXXX"), []byte("\xff\xfe\xfd\xfc"), 1)
	ctx, cancel := rpcCtx(2 * time.Second)
	defer cancel()
	var out []byte
	conn, _ := h.p.hostileConn(t)
	err = conn.Invoke(ctx, rlsPath, msg, &out, grpc.ForceCodec(rawCodec{}))
	if c := status.Code(err); c != codes.InvalidArgument && c != codes.Internal {
		t.Errorf("gRPC descriptor value of invalid UTF-8: %v, want it refused (InvalidArgument)", errOrOK(err))
	}
	body := `{"domain":"hostile","descriptors":[{"entries":[{"key":"probe","value":"` + h.sameKey + "-\xff\xfe" + `"}]}]}`
	if code, b, err := statusOf(cl.Post(h.p.httpURL("/json"), "application/json", strings.NewReader(body))); err != nil || code != 400 {
		t.Errorf("POST /json with a descriptor value of invalid UTF-8: %d %s %v, want 400", code, trim(b), err)
	}
}

// rawCodec sends and receives messages as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }

func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }
