package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/service/server"
	"github.com/sluicehq/sluice/service/status"
	"github.com/sluicehq/sluice/service/topk"
)

// topOptions are the flags of sluice top.
type topOptions struct {
	addr, domain, rule        string
	tokenFile                 string
	caFile, certFile, keyFile string
	n                         int
	watch                     bool
	interval                  time.Duration
}

// maxTopAnswer bounds the answer of /admin/top that sluice top reads.
const maxTopAnswer = 8 << 20

func top(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("top", "sluice top [flags]",
		`Print the keys denied most, per domain and rule, over the last one to two
windows (a minute each by default), as a running sluice serve's admin
listener answers them at /admin/top. The counts are that replica's: each
overestimates by at most its error, so the true count is between
count - error and count. With --watch, refresh every second until
interrupted.`, stderr)
	var o topOptions
	fs.StringVar(&o.addr, "addr", "127.0.0.1:9090", "the admin listener's `address` (host:port, or an http:// or https:// URL)")
	fs.StringVar(&o.domain, "domain", "", "only this `domain` (all when empty)")
	fs.StringVar(&o.rule, "rule", "", "only this rule `name` (all when empty)")
	fs.StringVar(&o.tokenFile, "token-file", "", "read the admin API's bearer token from this `file`")
	fs.StringVar(&o.caFile, "ca-file", "", "verify an https admin listener with the CA certificates of this PEM `file`")
	fs.StringVar(&o.certFile, "cert-file", "", "present this client certificate (PEM `file`) to an https admin listener that asks for one")
	fs.StringVar(&o.keyFile, "key-file", "", "the private key (PEM `file`) of --cert-file")
	fs.IntVar(&o.n, "n", topk.DefaultN, "keys per rule, 1 to 100")
	fs.BoolVar(&o.watch, "watch", false, "refresh every second until interrupted")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice top: unexpected argument %q (see sluice top -h)\n", fs.Arg(0))
		return 2
	}
	if o.n < 1 || o.n > topk.MaxN {
		fmt.Fprintln(stderr, "sluice top: --n must be between 1 and 100")
		return 2
	}
	o.interval = time.Second
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runTop(ctx, o, stdout); err != nil {
		fmt.Fprintln(stderr, "sluice top:", err)
		return 1
	}
	return 0
}

// runTop prints the answer once, or, with o.watch, every o.interval until
// ctx is done.
func runTop(ctx context.Context, o topOptions, w io.Writer) error {
	u, client, err := topClient(o)
	if err != nil {
		return err
	}
	var token string
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return fmt.Errorf("--token-file: %s is empty", o.tokenFile)
		}
	}
	t := time.NewTicker(o.interval)
	defer t.Stop()
	for {
		a, err := fetchTop(ctx, client, u, token)
		if err != nil {
			if o.watch && ctx.Err() != nil {
				return nil
			}
			return err
		}
		if o.watch {
			fmt.Fprint(w, "\x1b[H\x1b[2J") // home, clear the screen
		}
		printTop(w, a)
		if !o.watch {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// topClient is the URL of /admin/top with the query of o, and the client
// that asks it.
func topClient(o topOptions) (string, *http.Client, error) {
	base := o.addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", nil, fmt.Errorf("--addr %q: want host:port or an http(s):// URL", o.addr)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/admin/top"
	q := url.Values{}
	if o.domain != "" {
		q.Set("domain", o.domain)
	}
	if o.rule != "" {
		q.Set("rule", o.rule)
	}
	q.Set("n", strconv.Itoa(o.n))
	u.RawQuery = q.Encode()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if o.caFile != "" || o.certFile != "" || o.keyFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if o.caFile != "" {
			pem, err := os.ReadFile(o.caFile)
			if err != nil {
				return "", nil, fmt.Errorf("--ca-file: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return "", nil, fmt.Errorf("--ca-file: no PEM certificate in %s", o.caFile)
			}
		}
		if (o.certFile == "") != (o.keyFile == "") {
			return "", nil, errors.New("--cert-file and --key-file go together")
		}
		if o.certFile != "" {
			c, err := tls.LoadX509KeyPair(o.certFile, o.keyFile)
			if err != nil {
				return "", nil, fmt.Errorf("--cert-file: %w", err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		tr.TLSClientConfig = cfg
	}
	return u.String(), &http.Client{Transport: tr, Timeout: 10 * time.Second}, nil
}

func fetchTop(ctx context.Context, c *http.Client, u, token string) (*topk.Answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Accept", "application/json")
	res, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxTopAnswer+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxTopAnswer {
		return nil, fmt.Errorf("GET %s: the answer is larger than %d bytes", u, maxTopAnswer)
	}
	if res.StatusCode != http.StatusOK {
		var p struct{ Detail, Field string }
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &p) == nil && p.Detail != "" {
			msg = p.Detail
		}
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		return nil, fmt.Errorf("GET %s: %s: %s", u, res.Status, msg)
	}
	var a topk.Answer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	return &a, nil
}

// printTop prints a as a table.
func printTop(w io.Writer, a *topk.Answer) {
	fmt.Fprintf(w, "replica %s · %s to %s (windows of %gs) · counts overestimate by at most their error\n\n",
		a.Replica, a.From.UTC().Format(time.TimeOnly), a.To.UTC().Format(time.TimeOnly), a.Window)
	if len(a.Rules) == 0 {
		fmt.Fprintln(w, "no key denied")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DOMAIN\tRULE\tDENIALS\tCOUNT\tERROR\tKEY")
	for _, r := range a.Rules {
		if len(r.Keys) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%d\t\t\t\n", clean(r.Domain), clean(r.Rule), r.Denials)
		}
		for i, k := range r.Keys {
			d, ru, n := "", "", ""
			if i == 0 {
				d, ru, n = clean(r.Domain), clean(r.Rule), strconv.FormatUint(r.Denials, 10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", d, ru, n, k.Count, k.Error, clean(k.Key))
		}
	}
	tw.Flush()
	if a.Untracked > 0 {
		fmt.Fprintf(w, "\n%d denials of rules past the tracked rules' bound not shown\n", a.Untracked)
	}
}

// clean replaces the control characters of s (a request's values), so
// that they do not drive the terminal.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return '?'
		}
		return r
	}, s)
}

// operatorRoutes are the admin routes of the keys denied most and of the
// status page, for admin.Options.Routes: GET /admin/top and GET /admin/
// (exactly). The page samples the metrics every few seconds until stop is
// called.
func operatorRoutes(c *core, api *server.Server) (routes map[string]http.Handler, stop func(), err error) {
	brk := func() (open, ok bool) { return false, false } // no shared store, no breaker
	if ready := c.st.ready; ready != nil {
		brk = func() (bool, bool) { return !ready(), true }
	}
	page, err := status.New(status.Options{
		Gatherer: c.metrics.Registry(),
		Top:      c.metrics.Top(),
		Config:   c.eng.Config,
		Ready: func() error {
			if ok, why := api.Ready(); !ok {
				return errors.New(why)
			}
			return nil
		},
		BreakerOpen: brk,
	})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		page.Run(ctx)
	}()
	stop = func() {
		cancel()
		<-done
	}
	return map[string]http.Handler{
		"GET /admin/top": topk.Handler(c.metrics.Top(), ""),
		"GET /admin/{$}": page,
	}, stop, nil
}
