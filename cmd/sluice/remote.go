package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/remotestore"
	"github.com/sluicehq/sluice/service/certs"
)

// defaultRemoteTimeout is the default of --remote-store-timeout: above
// the round trip between any two regions on Earth (about 300 ms at most),
// so that a healthy home store is never taken for a failed one.
const defaultRemoteTimeout = 500 * time.Millisecond

// remoteFlags make another sluice serve's store API the shared store (a
// group of redisFlags): a region's sluice deciding through a home one.
type remoteFlags struct {
	addr       string
	timeout    time.Duration
	tokenFile  string
	plaintext  bool
	ca         string
	cert, key  string
	serverName string
}

func (g *remoteFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "remote-store", "", "decide through the store API of another sluice serve at this `address` (host:port, its --store-api-addr) instead of Redis: one quota for several regions without Redis credentials in each; --failure-mode, --replicas and --tiered apply as with --redis")
	fs.DurationVar(&g.timeout, "remote-store-timeout", defaultRemoteTimeout, "deadline of each call to --remote-store; set it above the round trip to it")
	fs.StringVar(&g.tokenFile, "remote-store-token-file", "", "send the bearer token of this `file` (its first line that is not a # comment) to --remote-store, whose --store-api-token-file holds it; re-read when it changes")
	fs.BoolVar(&g.plaintext, "remote-store-plaintext", false, "reach --remote-store without TLS: on loopback, or where the network encrypts (a service mesh); a token is then sent in the clear")
	fs.StringVar(&g.ca, "remote-store-tls-ca", "", "verify --remote-store's certificate with the CAs of this PEM `file` instead of the system's")
	fs.StringVar(&g.cert, "remote-store-tls-cert", "", "present this PEM client certificate `file` to --remote-store (its --store-api-client-ca verifies it); re-read when it changes")
	fs.StringVar(&g.key, "remote-store-tls-key", "", "PEM private key `file` of --remote-store-tls-cert")
	fs.StringVar(&g.serverName, "remote-store-tls-server-name", "", "the `name` to verify in --remote-store's certificate; the address's host when empty")
}

func (g *remoteFlags) validate() error {
	tlsSet := g.ca != "" || g.cert != "" || g.key != "" || g.serverName != ""
	switch {
	case g.addr == "" && (g.tokenFile != "" || g.plaintext || tlsSet):
		return errors.New("--remote-store-* need --remote-store")
	case g.timeout <= 0:
		return fmt.Errorf("--remote-store-timeout %v: want > 0", g.timeout)
	case g.plaintext && tlsSet:
		return errors.New("--remote-store-plaintext and --remote-store-tls-* are alternatives")
	case (g.cert == "") != (g.key == ""):
		return errors.New("--remote-store-tls-cert and --remote-store-tls-key go together")
	}
	return nil
}

// options are remotestore's options of the flags.
func (g *remoteFlags) options(log *slog.Logger) ([]remotestore.Option, error) {
	var opts []remotestore.Option
	if g.plaintext {
		opts = append(opts, remotestore.WithInsecure())
	} else {
		tc, err := certs.NewClient(certs.ClientOptions{CAFile: g.ca, CertFile: g.cert, KeyFile: g.key, ServerName: g.serverName, Log: log})
		if err != nil {
			return nil, fmt.Errorf("--remote-store-tls-*: %w", err)
		}
		opts = append(opts, remotestore.WithTLSConfig(tc))
	}
	if g.tokenFile != "" {
		opts = append(opts, remotestore.WithTokenFile(g.tokenFile))
	}
	return opts, nil
}

// openRemote dials another sluice's store API (--remote-store). When it
// does not answer at start, it returns the store and why, for failover to
// start with its breaker open: the client reconnects in the background.
func openRemote(ctx context.Context, g *remoteFlags, log *slog.Logger) (st sluice.FullStore, down, err error) {
	opts, err := g.options(log)
	if err != nil {
		return nil, nil, err
	}
	rs, err := remotestore.Dial(g.addr, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("--remote-store: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, min(connectTimeout, max(g.timeout, time.Second)))
	err = rs.Ping(pctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			rs.Close()
			return nil, nil, ctx.Err()
		}
		log.Warn("remote store unreachable at start: deciding by the failure policy until it answers", "addr", g.addr, "err", err)
		down = err
	}
	return rs, down, nil
}
