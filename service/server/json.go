package server

import (
	"net/http"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// handleJSON is the reference's POST /json: a RateLimitRequest in protojson
// (either field spelling), the RateLimitResponse in protojson, 200 when the
// overall code is OK and 429 when it is OVER_LIMIT.
func (s *Server) handleJSON(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var req pb.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		writeProblem(w, http.StatusBadRequest, "", "malformed RateLimitRequest JSON: "+err.Error())
		return
	}
	resp, err := s.svc.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		st := status.Convert(err)
		code := http.StatusServiceUnavailable
		switch st.Code() {
		case codes.InvalidArgument:
			code = http.StatusBadRequest
		case codes.Canceled, codes.DeadlineExceeded:
			code = http.StatusGatewayTimeout
		}
		writeProblem(w, code, "", st.Message())
		return
	}
	b, err := protojson.Marshal(resp)
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, "", "encoding response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(b)
}
