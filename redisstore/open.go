package redisstore

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/rueidis"
)

// Open connects to Redis with rueidis and returns a Store that closes the
// client on Close. The URL forms:
//
//	redis://[user:password@]host:port[/db]       one node (or a Cluster, detected)
//	rediss://...                                 the same over TLS
//	redis://host1:port?addr=host2:port&addr=...  several seed addresses
//	redis+cluster://[user:pass@]h1:p1,h2:p2,...  a Redis Cluster
//	redis+sentinel://[user:pass@]s1:p1,s2:p2?master=mymaster
//	                                             the master that Sentinel names
//	rediss+cluster://, rediss+sentinel://        the same over TLS
//
// With Sentinel, sentinel_user and sentinel_password authenticate to the
// sentinels; user:password to the master.
// user:password authenticate with AUTH (ACL user, or only a password as
// redis://:password@host). Other query parameters are rueidis's: db,
// dial_timeout, write_timeout, client_name, skip_verify (TLS), protocol=2.
// rueidis detects a Cluster by itself from any seed address.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	c, err := rueidis.NewClient(o)
	if err != nil {
		return nil, fmt.Errorf("redisstore: connect to %s: %w", redact(rawURL), err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redisstore: ping %s: %w", redact(rawURL), err)
	}
	return newStore(rueidisClient{c: c, owned: true}, opts), nil
}

// parseURL turns one of Open's URL forms into rueidis options.
func parseURL(raw string) (rueidis.ClientOption, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: URL %q has no scheme (want redis://, rediss://, redis+cluster:// or redis+sentinel://)", redact(raw))
	}
	base, mode, _ := strings.Cut(scheme, "+")
	if base != "redis" && base != "rediss" {
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: URL scheme %q is not redis, rediss, redis+cluster or redis+sentinel", scheme)
	}
	if mode != "" && mode != "cluster" && mode != "sentinel" {
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: URL scheme %q: unknown mode %q (want cluster or sentinel)", scheme, mode)
	}
	// Several comma-separated hosts become addr= parameters.
	auth := rest
	tail := ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		auth, tail = rest[:i], rest[i:]
	}
	user := ""
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		user, auth = auth[:i+1], auth[i+1:]
	}
	hosts := strings.Split(auth, ",")
	path, query, _ := strings.Cut(tail, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: URL query %q: %w", query, err)
	}
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	master := q.Get("master")
	if master == "" {
		master = q.Get("master_set")
	}
	sUser, sPass := q.Get("sentinel_user"), q.Get("sentinel_password")
	for _, k := range []string{"master", "master_set", "sentinel_user", "sentinel_password"} {
		q.Del(k)
	}
	if mode == "sentinel" && master == "" {
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: URL %q: sentinel needs ?master=<name>", redact(raw))
	}
	u := base + "://" + user + hosts[0] + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	o, err := rueidis.ParseURL(u)
	if err != nil {
		return o, fmt.Errorf("redisstore: URL %q: %w", redact(raw), err)
	}
	if mode == "sentinel" {
		o.Sentinel.MasterSet = master
		o.Sentinel.Username, o.Sentinel.Password = sUser, sPass
		o.Sentinel.TLSConfig = o.TLSConfig
	}
	o.DisableCache = true // no client-side caching: the store only runs scripts
	return o, nil
}

// redact hides a URL's password in errors.
func redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	auth, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		auth, tail = rest[:i], rest[i:]
	}
	i := strings.LastIndexByte(auth, '@')
	if i < 0 {
		return raw
	}
	user, _, hasPass := strings.Cut(auth[:i], ":")
	if hasPass {
		user += ":xxxxx"
	}
	return scheme + "://" + user + "@" + auth[i+1:] + tail
}
