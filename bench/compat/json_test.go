package compat

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// jsonBody is the protojson of req as a client of POST /json writes it:
// lowerCamelCase field names, or the proto names (both are accepted by
// protojson), chosen by the request's content, so that the reference and
// sluice get the same bytes.
func jsonBody(req *pb.RateLimitRequest) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return nil, err
	}
	h := fnv.New32a()
	h.Write(b)
	return protojson.MarshalOptions{UseProtoNames: h.Sum32()%2 == 1}.Marshal(req)
}

// shouldJSON sends req to the service's POST /json. The answer must be 200
// with an OK response or 429 with an OVER_LIMIT one (the reference's
// NewJsonHandler), with Content-Type application/json; any other answer is
// an error that carries the status code and the body.
func (s *service) shouldJSON(req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	body, err := jsonBody(req)
	if err != nil {
		return nil, err
	}
	rep, err := s.send(http.MethodPost, "/json", "application/json", body)
	if err != nil {
		return nil, err
	}
	return decodeJSON(rep)
}

// decodeJSON decodes a 200 or 429 answer of POST /json.
func decodeJSON(rep httpReply) (*pb.RateLimitResponse, error) {
	if rep.code != http.StatusOK && rep.code != http.StatusTooManyRequests {
		return nil, fmt.Errorf("HTTP %d (%s): %q", rep.code, rep.contentType, bytes.TrimSpace(rep.body))
	}
	resp := &pb.RateLimitResponse{}
	if err := protojson.Unmarshal(rep.body, resp); err != nil {
		return nil, fmt.Errorf("HTTP %d: response %q: %v", rep.code, rep.body, err)
	}
	want := http.StatusOK
	if resp.OverallCode == overLimit {
		want = http.StatusTooManyRequests
	}
	if rep.code != want || rep.contentType != "application/json" {
		return nil, fmt.Errorf("HTTP %d (%s) for overall_code %v, want %d (application/json): %s",
			rep.code, rep.contentType, resp.OverallCode, want, rep.body)
	}
	return resp, nil
}

// httpCase is one HTTP request to /json sent to both services, and the
// status code each must answer. Where they differ, why says why (and the
// difference is listed in the summary).
type httpCase struct {
	name         string
	method, path string
	contentType  string
	body         string
	ref, sl      int
	why          string
}

// testHTTP sends requests to /json that are not plain valid POSTs (and a
// few that are, in other spellings) to both services and compares the
// status codes. The reference's handler (src/server/server_impl.go,
// NewJsonHandler) is registered for every method on /json; it answers 400
// ("Bad Request", text/plain) to a body that is not a RateLimitRequest in
// protojson and to every error of ShouldRateLimit; 200 or 429 with the
// response in protojson otherwise. Where both answer 200 or 429, the
// decoded responses must be equal as over gRPC.
func testHTTP(t *testing.T, c *checker, tok func() string) {
	// valid is a request on a counter of its own.
	valid := func() string {
		return `{"domain":"compat","descriptors":[{"entries":[{"key":"plain","value":"` + tok() + `"}]}]}`
	}
	const (
		badRequest = http.StatusBadRequest
		okStatus   = http.StatusOK
		tooMany    = http.StatusTooManyRequests
	)
	methodWhy := "sluice serves POST /json only (405 Method Not Allowed, Allow: POST); the reference's handler " +
		"is registered for every method (server.router.HandleFunc(\"/json\", ...), no Methods()) and reads the body of any"
	for _, tc := range []httpCase{
		{name: "malformed JSON", method: "POST", path: "/json", body: `{"domain":`, ref: badRequest, sl: badRequest},
		{name: "empty body", method: "POST", path: "/json", body: ``, ref: badRequest, sl: badRequest},
		{name: "null", method: "POST", path: "/json", body: `null`, ref: badRequest, sl: badRequest},
		{name: "a JSON array", method: "POST", path: "/json", body: `[` + valid() + `]`, ref: badRequest, sl: badRequest},
		{name: "trailing data", method: "POST", path: "/json", body: valid() + ` x`, ref: badRequest, sl: badRequest},
		{name: "empty object: no domain", method: "POST", path: "/json", body: `{}`, ref: badRequest, sl: badRequest},
		{name: "no descriptors", method: "POST", path: "/json", body: `{"domain":"compat"}`, ref: badRequest, sl: badRequest},
		{name: "unknown field", method: "POST", path: "/json", body: `{"domain":"compat","bogus":1,"descriptors":[{"entries":[{"key":"plain","value":"` + tok() + `"}]}]}`, ref: badRequest, sl: badRequest},
		{name: "duplicate field", method: "POST", path: "/json", body: `{"domain":"compat","domain":"compat","descriptors":[{"entries":[{"key":"plain","value":"` + tok() + `"}]}]}`, ref: badRequest, sl: badRequest},
		{name: "both spellings of one field", method: "POST", path: "/json", body: `{"domain":"compat","hits_addend":1,"hitsAddend":1,"descriptors":[{"entries":[{"key":"plain","value":"` + tok() + `"}]}]}`, ref: badRequest, sl: badRequest},
		{name: "hitsAddend out of uint32", method: "POST", path: "/json", body: `{"domain":"compat","hitsAddend":4294967296,"descriptors":[{"entries":[{"key":"plain","value":"` + tok() + `"}]}]}`, ref: badRequest, sl: badRequest},
		{name: "unknown unit name", method: "POST", path: "/json", body: `{"domain":"compat","descriptors":[{"entries":[{"key":"ovr","value":"` + tok() + `"}],"limit":{"requestsPerUnit":3,"unit":"FORTNIGHT"}}]}`, ref: badRequest, sl: badRequest},
		{name: "numbers as strings, unit as a number", method: "POST", path: "/json", body: `{"domain":"compat","hitsAddend":"2","descriptors":[{"entries":[{"key":"ovr","value":"` + tok() + `"}],"limit":{"requestsPerUnit":"3","unit":2},"hitsAddend":"1"}]}`, ref: okStatus, sl: okStatus},
		{name: "proto field names", method: "POST", path: "/json", body: `{"domain":"compat","hits_addend":6,"descriptors":[{"entries":[{"key":"plain","value":"` + tok() + `"}]}]}`, ref: tooMany, sl: tooMany},
		{name: "no Content-Type", method: "POST", path: "/json", body: valid(), ref: okStatus, sl: okStatus},
		{name: "Content-Type text/plain", method: "POST", path: "/json", contentType: "text/plain", body: valid(), ref: okStatus, sl: okStatus},
		{name: "a query string", method: "POST", path: "/json?x=1", contentType: "application/json", body: valid(), ref: okStatus, sl: okStatus},
		{name: "unknown domain", method: "POST", path: "/json", body: `{"domain":"compat-unknown","descriptors":[{"entries":[{"key":"plain","value":"x"}]}]}`, ref: okStatus, sl: okStatus},
		{name: "a trailing slash", method: "POST", path: "/json/", body: valid(), ref: http.StatusNotFound, sl: http.StatusNotFound},
		{name: "GET with a valid body", method: "GET", path: "/json", body: valid(), ref: okStatus, sl: http.StatusMethodNotAllowed, why: methodWhy},
		{name: "GET with no body", method: "GET", path: "/json", ref: badRequest, sl: http.StatusMethodNotAllowed, why: methodWhy},
		{name: "PUT with a valid body", method: "PUT", path: "/json", body: valid(), ref: okStatus, sl: http.StatusMethodNotAllowed, why: methodWhy},
		{name: "descriptor with no entries", method: "POST", path: "/json", body: `{"domain":"compat","descriptors":[{"entries":[{"key":"plain","value":"` + tok() + `"}]},{}]}`,
			ref: okStatus, sl: badRequest, why: "COMPAT.md item 3: a descriptor with no entries is InvalidArgument in sluice (400 on /json)"},
		// The reference's API (go-control-plane envoy v1.32.4) has no
		// is_negative_hits: an unknown field, which protojson rejects (over
		// gRPC it is ignored, and the hit counted); sluice gives the hits
		// back (COMPAT.md item 10).
		{name: "is_negative_hits", method: "POST", path: "/json", body: `{"domain":"compat","descriptors":[{"entries":[{"key":"plain","value":"` + tok() + `"}],"isNegativeHits":true}]}`,
			ref: badRequest, sl: okStatus, why: "COMPAT.md item 10: sluice's API has is_negative_hits and gives the hits back (200 OK); " +
				"the reference's API has no such field, which protojson rejects (400)"},
		{name: "override unitMultiplier", method: "POST", path: "/json", body: `{"domain":"compat","descriptors":[{"entries":[{"key":"ovr","value":"` + tok() + `"}],"limit":{"requestsPerUnit":3,"unit":"MINUTE","unitMultiplier":2}}]}`,
			ref: badRequest, sl: okStatus, why: "the reference's API (go-control-plane envoy v1.32.4) has no RateLimitOverride.unit_multiplier: " +
				"protojson rejects the unknown field (400); sluice's API has it and accepts the request (and, as the reference over gRPC, " +
				"ignores the multiplier: 3 per minute)"},
		{name: "override of rate 0", method: "POST", path: "/json", body: `{"domain":"compat","descriptors":[{"entries":[{"key":"ovr","value":"` + tok() + `"}],"limit":{"requestsPerUnit":0,"unit":"MINUTE"}}]}`,
			ref: tooMany, sl: badRequest, why: "COMPAT.md item 3: an override of rate 0 is InvalidArgument in sluice (400 on /json)"},
		{name: "a body over 1 MiB", method: "POST", path: "/json", body: `{"domain":"compat","descriptors":[{"entries":[{"key":"plain","value":"` + tok() + `"}]}]` + strings.Repeat(" ", 1<<20) + "}",
			ref: okStatus, sl: http.StatusRequestEntityTooLarge, why: "sluice reads at most 1 MiB of a body (server.DefaultMaxBody: 413); the reference reads any (io.ReadAll)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := time.Now()
			ref, refErr := c.ref.send(tc.method, tc.path, tc.contentType, []byte(tc.body))
			sl, slErr := c.sl.send(tc.method, tc.path, tc.contentType, []byte(tc.body))
			slack := time.Since(asked)
			if refErr != nil || slErr != nil {
				t.Fatalf("reference: %v, sluice: %v", refErr, slErr)
			}
			evidence := fmt.Sprintf("%s %s %.200q\n  reference: %d %s %.300q\n  sluice:    %d %s %.300q", tc.method, tc.path, tc.body,
				ref.code, ref.contentType, bytes.TrimSpace(ref.body), sl.code, sl.contentType, bytes.TrimSpace(sl.body))
			if ref.code != tc.ref || sl.code != tc.sl {
				t.Fatalf("want reference %d, sluice %d:\n  %s", tc.ref, tc.sl, evidence)
			}
			if tc.ref != tc.sl {
				c.observe("http: "+tc.why, evidence)
				return
			}
			if ref.code != okStatus && ref.code != tooMany {
				return
			}
			r, err := decodeJSON(ref)
			if err != nil {
				t.Fatalf("reference: %v", err)
			}
			s, err := decodeJSON(sl)
			if err != nil {
				t.Fatalf("sluice: %v", err)
			}
			r, s = proto.Clone(r).(*pb.RateLimitResponse), proto.Clone(s).(*pb.RateLimitResponse)
			alignResponse(r, s, slack)
			if !proto.Equal(r, s) {
				t.Errorf("responses differ:\n  %s", evidence)
			}
		})
	}
	// Error answers differ in their body: the reference's is text/plain
	// "Bad Request" (http.Error), sluice's an RFC 9457 problem+json with the
	// reason.
	ref, _ := c.ref.send("POST", "/json", "", []byte(`{}`))
	sl, _ := c.sl.send("POST", "/json", "", []byte(`{}`))
	if ref.contentType != sl.contentType {
		c.observe("http: the body of an error answer: the reference's http.Error text, sluice's problem+json",
			fmt.Sprintf("POST /json {}\n  reference: %d %s %q\n  sluice:    %d %s %q", ref.code, ref.contentType,
				bytes.TrimSpace(ref.body), sl.code, sl.contentType, bytes.TrimSpace(sl.body)))
	}
}

// observe counts a difference (or an observation) that is not a response
// compared by step, for the summary, with its first evidence.
func (c *checker) observe(id, evidence string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[id] == 0 {
		c.example[id] = evidence
	}
	c.seen[id]++
}
