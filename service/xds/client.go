// Package xds is sluice serve's xDS client: it subscribes to the
// RateLimitConfig resources of a control plane over the Aggregated
// Discovery Service, state of the world, as envoyproxy/ratelimit does with
// CONFIG_TYPE=GRPC_XDS_SOTW, and hands every update to the caller, who
// accepts it (ACK) or rejects it with an error (NACK, the error in
// error_detail; the running configuration stays).
//
// The client is a small ADS loop on gRPC: one stream per connection,
// a DiscoveryRequest for the type, then for each response an ACK
// (version_info and response_nonce of the response) or a NACK (the last
// accepted version_info, the response's nonce and the error). When the
// stream or the connection fails, the client waits the back-off delay,
// dials again and subscribes again with the last accepted version.
package xds

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/service/config"
)

// TypeURL is the type of the resources the client subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Bounds of the client's options and of what the control plane sends.
const (
	// DefaultMaxMessageSize is the largest response accepted when
	// Options.MaxMessageSize is 0: gRPC's default.
	DefaultMaxMessageSize = 4 << 20
	// MaxMessageSize bounds Options.MaxMessageSize.
	MaxMessageSize = 1 << 30
	// MaxErrorDetailBytes bounds the error text of a NACK.
	MaxErrorDetailBytes = 4096
)

// Update is one response of the control plane: every resource in force.
type Update struct {
	Version   string // the response's version_info
	Resources []*rlsconf.RateLimitConfig
}

// Backoff is the delay between attempts to reach the control plane, with
// the reference's settings (XDS_CLIENT_BACKOFF_*): the first delay is
// Initial, each failed attempt doubles it, up to Max; with Jitter, each
// delay is drawn uniformly within ±RandomFactor of its value (and never
// below Initial nor above Max). A stream that delivered a response starts
// the sequence again at Initial.
type Backoff struct {
	Initial, Max time.Duration
	RandomFactor float64 // in [0, 1]
	Jitter       bool
}

// DefaultBackoff is the reference's: 10s, up to 60s, ±50%.
var DefaultBackoff = Backoff{Initial: 10 * time.Second, Max: 60 * time.Second, RandomFactor: 0.5, Jitter: true}

// Delay is the delay before attempt n+1 after n failed ones (n >= 0);
// rnd returns a float in [0, 1).
func (b Backoff) Delay(n int, rnd func() float64) time.Duration {
	d := b.Initial
	for i := 0; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if b.Jitter && b.RandomFactor > 0 {
		f := 1 + b.RandomFactor*(2*rnd()-1)
		d = time.Duration(float64(d) * f)
	}
	return max(b.Initial, min(d, b.Max))
}

func (b Backoff) validate() error {
	switch {
	case b.Initial <= 0 || b.Max <= 0:
		return errors.New("back-off: initial and max must be > 0")
	case b.Max < b.Initial:
		return errors.New("back-off: max must be >= initial")
	case !(b.RandomFactor >= 0 && b.RandomFactor <= 1):
		return errors.New("back-off: random factor must be within [0, 1]")
	}
	return nil
}

// Options configure a Client.
type Options struct {
	// Server is the control plane's address, HOST:PORT.
	Server string
	// NodeID and NodeMetadata identify this client to the control plane,
	// which serves a snapshot per node id.
	NodeID       string
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata on every stream (lower-case names).
	Headers map[string]string
	// TLS, when not nil, is the TLS configuration of the connection; nil
	// is plaintext.
	TLS *tls.Config
	// Backoff is the delay between attempts; the zero Backoff is
	// DefaultBackoff.
	Backoff Backoff
	// MaxMessageSize bounds a response, in bytes; 0 is
	// DefaultMaxMessageSize.
	MaxMessageSize int
	// Apply is given every update, in order; an error rejects it (NACK)
	// and should leave the running configuration in force.
	Apply func(Update) error
	// Log receives the client's events; nil discards them.
	Log *slog.Logger
}

// Client is an xDS client of RateLimitConfig resources.
type Client struct {
	o    Options
	node *corev3.Node
	md   metadata.MD
	rnd  func() float64
	// accepted is the version of the last accepted update, sent again when
	// the client subscribes anew; rejected is the digest of the last
	// rejected response and why. Only the Run goroutine touches them.
	accepted string
	rejected struct {
		digest [32]byte
		err    error
	}
}

// RepeatDelay paces the NACKs of a response the client rejected already: a
// control plane answers a NACK with the same response again (the snapshot
// in force did not change), and without a pause the two would loop as fast
// as the network allows.
const RepeatDelay = time.Second

// New checks o and returns a client; Run connects it.
func New(o Options) (*Client, error) {
	if o.Server == "" {
		return nil, errors.New("xds: no server address")
	}
	if o.Apply == nil {
		return nil, errors.New("xds: no Apply function")
	}
	if o.Backoff == (Backoff{}) {
		o.Backoff = DefaultBackoff
	}
	if err := o.Backoff.validate(); err != nil {
		return nil, fmt.Errorf("xds: %w", err)
	}
	if o.MaxMessageSize < 0 || o.MaxMessageSize > MaxMessageSize {
		return nil, fmt.Errorf("xds: max message size %d: want 0 (the default, %d) to %d", o.MaxMessageSize, DefaultMaxMessageSize, MaxMessageSize)
	}
	if o.MaxMessageSize == 0 {
		o.MaxMessageSize = DefaultMaxMessageSize
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	md := metadata.MD{}
	for k, v := range o.Headers {
		if err := checkHeader(k, v); err != nil {
			return nil, fmt.Errorf("xds: %w", err)
		}
		md.Append(k, v)
	}
	fields := make(map[string]*structpb.Value, len(o.NodeMetadata))
	for k, v := range o.NodeMetadata {
		fields[k] = structpb.NewStringValue(v)
	}
	node := &corev3.Node{Id: o.NodeID, Metadata: &structpb.Struct{Fields: fields}, UserAgentName: "sluice"}
	return &Client{o: o, node: node, md: md, rnd: rand.Float64}, nil
}

// checkHeader checks a header as gRPC metadata: a lower-case name of
// [0-9a-z-_.], not a reserved "grpc-" one nor a binary "-bin" one, and a
// printable ASCII value.
func checkHeader(k, v string) error {
	if k == "" || len(k) > 256 || strings.HasPrefix(k, "grpc-") || strings.HasSuffix(k, "-bin") {
		return fmt.Errorf("header %q: want a lower-case name of at most 256 bytes, not grpc-* nor *-bin", k)
	}
	for _, c := range []byte(k) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("header %q: a name holds 0-9, a-z, '-', '_' and '.' only", k)
		}
	}
	if len(v) > 8192 {
		return fmt.Errorf("header %q: value longer than 8192 bytes", k)
	}
	for _, c := range []byte(v) {
		if c < 0x20 || c > 0x7e {
			return fmt.Errorf("header %q: the value holds printable ASCII only", k)
		}
	}
	return nil
}

// Run subscribes until ctx ends, reconnecting with back-off when the
// control plane fails or goes away.
func (c *Client) Run(ctx context.Context) {
	failed := 0
	for {
		delivered, err := c.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if delivered {
			failed = 0
		}
		d := c.o.Backoff.Delay(failed, c.rnd)
		failed++
		c.o.Log.Warn("xds: control plane unavailable; retrying", "server", c.o.Server, "err", err, "retry_in", d.String())
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// stream dials the control plane and runs one ADS stream until it fails or
// ctx ends; delivered tells whether a response arrived.
func (c *Client) stream(ctx context.Context) (delivered bool, err error) {
	creds := insecure.NewCredentials()
	if c.o.TLS != nil {
		creds = credentials.NewTLS(c.o.TLS)
	}
	conn, err := grpc.NewClient(c.o.Server, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.o.MaxMessageSize)))
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, c.md))
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		return false, err
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, VersionInfo: c.accepted}); err != nil {
		return false, recvErr(st, err)
	}
	c.o.Log.Info("xds: subscribed", "server", c.o.Server, "node", c.node.GetId(), "version", c.accepted)
	for {
		resp, err := st.Recv()
		if err != nil {
			return delivered, err
		}
		delivered = true
		req := c.handle(ctx, resp)
		if err := st.Send(req); err != nil {
			return delivered, recvErr(st, err)
		}
	}
}

// recvErr is the stream's status after a failed Send, which gRPC reports
// as io.EOF.
func recvErr(st grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse], err error) error {
	if _, rerr := st.Recv(); rerr != nil {
		return rerr
	}
	return err
}

// handle decodes and applies a response and returns its ACK or NACK. The
// same response rejected again is NACKed again, after RepeatDelay, without
// applying it.
func (c *Client) handle(ctx context.Context, resp *discovery.DiscoveryResponse) *discovery.DiscoveryRequest {
	req := &discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}
	digest := digestOf(resp)
	if c.rejected.err != nil && digest == c.rejected.digest {
		req.VersionInfo = c.accepted
		req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: truncate(c.rejected.err.Error(), MaxErrorDetailBytes)}
		c.o.Log.Debug("xds: the rejected configuration again (NACK)", "version", resp.GetVersionInfo())
		t := time.NewTimer(RepeatDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		return req
	}
	u, err := decode(resp)
	if err == nil {
		err = c.o.Apply(u)
	}
	if err != nil {
		c.rejected.digest, c.rejected.err = digest, err
		req.VersionInfo = c.accepted
		req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: truncate(err.Error(), MaxErrorDetailBytes)}
		c.o.Log.Error("xds: configuration rejected (NACK); keeping the running configuration",
			"version", resp.GetVersionInfo(), "running_version", c.accepted, "err", err)
		return req
	}
	c.rejected.err = nil
	c.accepted = resp.GetVersionInfo()
	req.VersionInfo = c.accepted
	c.o.Log.Debug("xds: configuration accepted (ACK)", "version", c.accepted, "resources", len(u.Resources))
	return req
}

// digestOf is the digest of what a response says: its type, version and
// resources in any order (a control plane may send them in another order
// each time), not its nonce.
func digestOf(resp *discovery.DiscoveryResponse) [32]byte {
	var n [8]byte
	write := func(h hash.Hash, b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	res := make([][32]byte, len(resp.GetResources()))
	for i, a := range resp.GetResources() {
		h := sha256.New()
		write(h, []byte(a.GetTypeUrl()))
		write(h, a.GetValue())
		h.Sum(res[i][:0])
	}
	slices.SortFunc(res, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
	h := sha256.New()
	write(h, []byte(resp.GetTypeUrl()))
	write(h, []byte(resp.GetVersionInfo()))
	for _, r := range res {
		h.Write(r[:])
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// decode checks a response's type and decodes its resources.
func decode(resp *discovery.DiscoveryResponse) (Update, error) {
	u := Update{Version: resp.GetVersionInfo()}
	if t := resp.GetTypeUrl(); t != TypeURL {
		return u, fmt.Errorf("response of type %q: this client subscribes to %s only", t, TypeURL)
	}
	if n := len(resp.GetResources()); n > config.MaxXDSResources {
		return u, fmt.Errorf("%d resources: at most %d", n, config.MaxXDSResources)
	}
	u.Resources = make([]*rlsconf.RateLimitConfig, 0, len(resp.GetResources()))
	for i, a := range resp.GetResources() {
		if a.GetTypeUrl() != TypeURL {
			return u, fmt.Errorf("resource #%d of type %q: want %s", i, a.GetTypeUrl(), TypeURL)
		}
		r := &rlsconf.RateLimitConfig{}
		if err := proto.Unmarshal(a.GetValue(), r); err != nil {
			return u, fmt.Errorf("resource #%d: %v", i, err)
		}
		u.Resources = append(u.Resources, r)
	}
	return u, nil
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = " ..."
	s = s[:n-len(more)]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + more
}
