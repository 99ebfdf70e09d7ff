package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/refstats"
	"github.com/sluicehq/sluice/service/statsd"
)

// The reference's environment: when sluice replaces envoyproxy/ratelimit's
// image (Envoy Gateway, Helm charts), the container keeps that image's
// environment variables, and serve reads them with the reference's meaning
// and defaults. They have the lowest precedence: a flag, then a SLUICE_*
// variable, then the reference's variables, then sluice's defaults.
// docs/reference-env.md lists every variable and what serve does with it.

// refTriggers are the reference's variables that no other software sets by
// accident: with --reference-env auto, any of them turns the reference's
// environment on. Generic names (PORT, HOST, LOG_LEVEL, REDIS_URL) never do.
var refTriggers = []string{
	"CONFIG_TYPE", "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY",
	"RUNTIME_WATCH_ROOT", "RUNTIME_IGNOREDOTFILES", "REDIS_SOCKET_TYPE", "USE_STATSD",
	"BACKEND_TYPE", "CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_NODE_ID",
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "LIMIT_RESPONSE_HEADERS_ENABLED",
	"GRPC_SERVER_USE_TLS", "LOCAL_CACHE_SIZE_IN_BYTES", "NEAR_LIMIT_RATIO",
}

// refAssign sets a flag from the reference's environment.
type refAssign struct {
	Var     string // the variables it comes from, "GRPC_HOST,GRPC_PORT"
	Flag    string // without dashes
	Value   string
	Default bool     // the reference's default: none of Var is set
	Unless  []string // flags whose being set by the user drops it too
}

// refNote is a variable serve ignores, or one it cannot honour (an error),
// with the reason; setting a flag of Unless resolves an error.
type refNote struct {
	Var    string
	Msg    string
	Unless []string
}

// refPlan is what the reference's environment asks of serve.
type refPlan struct {
	Assign  []refAssign
	Ignored []refNote
	Errors  []refNote
	// LocalCacheKeys is the size of the local cache of over-limit keys
	// (LOCAL_CACHE_SIZE_IN_BYTES), in keys; 0: none.
	LocalCacheKeys int
}

// localCacheKeyBytes is what LOCAL_CACHE_SIZE_IN_BYTES counts for each key
// of the local cache of over-limit keys.
const localCacheKeyBytes = 256

// refEnv reads the reference's variables through lookup.
type refEnv struct {
	lookup func(string) (string, bool)
	plan   refPlan
}

func (e *refEnv) get(name string) (string, bool) {
	v, ok := e.lookup(name)
	return strings.TrimSpace(v), ok
}

// str is name's value, or def when it is unset.
func (e *refEnv) str(name, def string) string {
	if v, ok := e.get(name); ok {
		return v
	}
	return def
}

func (e *refEnv) set(name string) bool {
	_, ok := e.lookup(name)
	return ok
}

func (e *refEnv) fail(name, format string, args ...any) {
	e.plan.Errors = append(e.plan.Errors, refNote{Var: name, Msg: fmt.Sprintf(format, args...)})
}

func (e *refEnv) failUnless(unless []string, name, format string, args ...any) {
	e.plan.Errors = append(e.plan.Errors, refNote{Var: name, Msg: fmt.Sprintf(format, args...), Unless: unless})
}

func (e *refEnv) ignore(name, reason string) {
	if e.set(name) {
		e.plan.Ignored = append(e.plan.Ignored, refNote{Var: name, Msg: reason})
	}
}

// assign sets flag to value; vars are the variables value comes from (none
// set: the reference's default).
func (e *refEnv) assign(flagName, value string, unless []string, vars ...string) {
	set := slices.DeleteFunc(slices.Clone(vars), func(v string) bool { return !e.set(v) })
	def := len(set) == 0
	if !def {
		vars = set
	}
	e.plan.Assign = append(e.plan.Assign, refAssign{Var: strings.Join(vars, ","), Flag: flagName, Value: value, Default: def, Unless: unless})
}

// assignIfSet sets flag to the variable's value when it is set.
func (e *refEnv) assignIfSet(flagName, name string, unless ...string) {
	if v, ok := e.get(name); ok {
		e.assign(flagName, v, unless, name)
	}
}

// boolean is name's value as the reference parses it (strconv.ParseBool);
// a bad value is an error and def.
func (e *refEnv) boolean(name string, def bool) bool {
	v, ok := e.get(name)
	if !ok || v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.fail(name, "%q: want true or false", v)
		return def
	}
	return b
}

// port is name's value as a TCP port, def when unset.
func (e *refEnv) port(name, def string) string {
	v, ok := e.get(name)
	if !ok {
		return def
	}
	if n, err := strconv.Atoi(v); err != nil || n < 0 || n > 65535 {
		e.fail(name, "%q: want a port number from 0 to 65535", v)
		return def
	}
	return v
}

// duration checks name's value as a Go duration (the reference's format:
// 10s, 1h30m) and assigns it to flagName.
func (e *refEnv) duration(flagName, name string, unless ...string) {
	v, ok := e.get(name)
	if !ok {
		return
	}
	if d, err := time.ParseDuration(v); err != nil || d < 0 {
		e.fail(name, "%q: want a duration such as 500ms, 10s or 1h", v)
		return
	}
	e.assign(flagName, v, unless, name)
}

// referencePlan maps the reference's environment, read through lookup, onto
// serve's flags: the assignments, the variables ignored and the errors. It
// reads nothing else; applyReferencePlan applies it.
func referencePlan(lookup func(string) (string, bool)) refPlan {
	e := &refEnv{lookup: lookup}
	e.listeners()
	e.logging()
	e.configSource()
	e.store()
	e.service()
	e.stats()
	e.tracing()
	return e.plan
}

// listeners: the HTTP, gRPC and debug addresses, and gRPC's TLS.
func (e *refEnv) listeners() {
	if e.set("HOST") || e.set("PORT") {
		e.assign("http", net.JoinHostPort(e.str("HOST", ""), e.port("PORT", "8080")), nil, "HOST", "PORT")
	}
	if v, _ := e.get("GRPC_UDS"); v != "" {
		// gRPC on the Unix socket only, as the reference; HTTP (and its
		// /healthcheck) stays on HOST:PORT.
		if err := checkSocketPath(v); err != nil {
			e.fail("GRPC_UDS", "%q: %v", v, strings.TrimPrefix(err.Error(), "--grpc-uds: "))
		} else {
			e.assign("grpc-uds", v, []string{"grpc", "grpc-uds"}, "GRPC_UDS")
		}
		e.ignore("GRPC_HOST", "GRPC_UDS is set: gRPC is served on the Unix socket only")
		e.ignore("GRPC_PORT", "GRPC_UDS is set: gRPC is served on the Unix socket only")
	} else if e.set("GRPC_HOST") || e.set("GRPC_PORT") {
		e.assign("grpc", net.JoinHostPort(e.str("GRPC_HOST", ""), e.port("GRPC_PORT", "8081")), nil, "GRPC_HOST", "GRPC_PORT")
	}
	// The debug listener (the admin endpoints), at DEBUG_HOST:DEBUG_PORT
	// as the reference's; its statistics' Prometheus endpoint, when on, is
	// a listener of its own (stats).
	debug := net.JoinHostPort(e.str("DEBUG_HOST", "0.0.0.0"), e.port("DEBUG_PORT", "6070"))
	e.assign("debug-addr", debug, []string{"admin"}, "DEBUG_HOST", "DEBUG_PORT")

	if e.boolean("GRPC_SERVER_USE_TLS", false) {
		tls := []string{"tls-cert", "tls-key"}
		cert, _ := e.get("GRPC_SERVER_TLS_CERT")
		key, _ := e.get("GRPC_SERVER_TLS_KEY")
		if cert == "" || key == "" {
			e.failUnless(tls, "GRPC_SERVER_USE_TLS", "true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
		} else {
			e.assign("tls-cert", cert, nil, "GRPC_SERVER_TLS_CERT")
			e.assign("tls-key", key, nil, "GRPC_SERVER_TLS_KEY")
			// The reference's TLS is gRPC's only: HTTP (/json, the
			// probes) and the debug port stay plain.
			e.assign("tls-grpc-only", "true", tls, "GRPC_SERVER_USE_TLS")
			e.assignIfSet("tls-client-ca", "GRPC_CLIENT_TLS_CACERT", tls...)
			e.assignIfSet("tls-client-san", "GRPC_CLIENT_TLS_SAN", tls...)
		}
	} else {
		for _, v := range []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN"} {
			e.ignore(v, "GRPC_SERVER_USE_TLS is not true")
		}
	}
	e.ignore("GRPC_SERVER_TLS_CA_CERT", "not a setting of envoyproxy/ratelimit, which does not read it (its client CA is GRPC_CLIENT_TLS_CACERT): gRPC clients are not asked for certificates")
	e.duration("grpc-max-connection-age", "GRPC_MAX_CONNECTION_AGE")
	e.duration("grpc-max-connection-age-grace", "GRPC_MAX_CONNECTION_AGE_GRACE")
}

// logging: LOG_LEVEL (default WARN) and LOG_FORMAT.
func (e *refEnv) logging() {
	level := e.str("LOG_LEVEL", "WARN")
	switch strings.ToLower(level) {
	case "trace", "debug":
		level = "debug"
	case "info":
		level = "info"
	case "warn", "warning":
		level = "warn"
	case "error", "fatal", "panic":
		level = "error"
	default:
		e.fail("LOG_LEVEL", "%q: want trace, debug, info, warn, error, fatal or panic", level)
		return
	}
	e.assign("log-level", level, nil, "LOG_LEVEL")
	if v, ok := e.get("LOG_FORMAT"); ok {
		switch f := strings.ToLower(v); f {
		case "json", "text":
			e.assign("log-format", f, nil, "LOG_FORMAT")
		default:
			e.fail("LOG_FORMAT", "%q: want text or json", v)
		}
	}
}

// configSource: files under RUNTIME_ROOT, or xDS.
func (e *refEnv) configSource() {
	xdsFlags := []string{"xds-server"}
	fileFlags := []string{"config"}
	switch t := e.str("CONFIG_TYPE", "FILE"); t {
	case "FILE":
		// Both of the reference's layouts read the files below
		// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
		dir := filepath.Join(e.str("RUNTIME_ROOT", "/srv/runtime_data/current"), e.str("RUNTIME_SUBDIRECTORY", ""), e.str("RUNTIME_APPDIRECTORY", "config"))
		e.assign("config", dir, xdsFlags, "CONFIG_TYPE", "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "RUNTIME_IGNOREDOTFILES")
		for _, v := range []string{"CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA",
			"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
			"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
			"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
			"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"} {
			e.ignore(v, "CONFIG_TYPE is FILE")
		}
		e.ignore("FORCE_START_WITHOUT_INITIAL_CONFIG", "CONFIG_TYPE is FILE: the files are read before serving")
	case "GRPC_XDS_SOTW":
		e.assign("xds-server", e.str("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"), fileFlags, "CONFIG_TYPE", "CONFIG_GRPC_XDS_SERVER_URL")
		e.assign("xds-node-id", e.str("CONFIG_GRPC_XDS_NODE_ID", "default"), fileFlags, "CONFIG_GRPC_XDS_NODE_ID")
		if v, _ := e.get("CONFIG_GRPC_XDS_NODE_METADATA"); v != "" {
			e.assign("xds-node-metadata", v, fileFlags, "CONFIG_GRPC_XDS_NODE_METADATA")
		}
		if v, _ := e.get("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"); v != "" {
			e.assign("xds-headers", v, fileFlags, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")
		}
		if e.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false) {
			e.assign("xds-tls", "true", fileFlags, "CONFIG_GRPC_XDS_SERVER_USE_TLS")
			e.assignIfSet("xds-tls-ca", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", fileFlags...)
			e.assignIfSet("xds-tls-cert", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", fileFlags...)
			e.assignIfSet("xds-tls-key", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", fileFlags...)
			e.assignIfSet("xds-tls-server-name", "CONFIG_GRPC_XDS_SERVER_TLS_SAN", fileFlags...)
		} else {
			for _, v := range []string{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"} {
				e.ignore(v, "CONFIG_GRPC_XDS_SERVER_USE_TLS is not true")
			}
		}
		e.duration("xds-backoff-initial", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", fileFlags...)
		e.duration("xds-backoff-max", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", fileFlags...)
		if v, ok := e.get("XDS_CLIENT_BACKOFF_RANDOM_FACTOR"); ok {
			if f, err := strconv.ParseFloat(v, 64); err != nil || f < 0 || f > 1 {
				e.fail("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "%q: want a number from 0 to 1", v)
			} else {
				e.assign("xds-backoff-random-factor", v, fileFlags, "XDS_CLIENT_BACKOFF_RANDOM_FACTOR")
			}
		}
		if e.set("XDS_CLIENT_BACKOFF_JITTER") {
			e.assign("xds-backoff-jitter", strconv.FormatBool(e.boolean("XDS_CLIENT_BACKOFF_JITTER", true)), fileFlags, "XDS_CLIENT_BACKOFF_JITTER")
		}
		if v, _ := e.get("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"); v != "" && v != "0" {
			if n, err := strconv.ParseUint(v, 10, 31); err != nil {
				e.fail("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "%q: want a number of bytes", v)
			} else {
				e.assign("xds-max-message-size", strconv.FormatUint(n, 10), fileFlags, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES")
			}
		}
		if e.set("FORCE_START_WITHOUT_INITIAL_CONFIG") {
			e.assign("xds-force-start", strconv.FormatBool(e.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false)), fileFlags, "FORCE_START_WITHOUT_INITIAL_CONFIG")
		}
		e.ignore("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "envoyproxy/ratelimit allows no retry at this interval either: both reconnect to the xDS server with the XDS_CLIENT_BACKOFF_* back-off")
		for _, v := range []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"} {
			e.ignore(v, "CONFIG_TYPE is GRPC_XDS_SOTW")
		}
	default:
		e.failUnless(append(fileFlags, xdsFlags...), "CONFIG_TYPE", "%q: want FILE or GRPC_XDS_SOTW", t)
	}
	e.ignore("RUNTIME_WATCH_ROOT", "sluice rereads its configuration files when their content changes, checked every --reload-interval")
	if t := e.str("CONFIG_TYPE", "FILE"); t == "FILE" && !e.boolean("RUNTIME_IGNOREDOTFILES", false) {
		// The reference's default: its walk reads dot files and dot
		// directories, not a dot symbolic link to a directory.
		e.assign("config-dot-files", "true", xdsFlags, "RUNTIME_IGNOREDOTFILES")
	}
	if e.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false) {
		e.assign("ready-needs-config", "true", nil, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")
	}
	if e.set("MERGE_DOMAIN_CONFIG") {
		e.assign("merge-domains", strconv.FormatBool(e.boolean("MERGE_DOMAIN_CONFIG", false)), nil, "MERGE_DOMAIN_CONFIG")
	}
}

// memcacheVars are the reference's variables of its memcached backend.
var memcacheVars = []string{"MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS",
	"MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION"}

// store: the backend, Redis's address, type, auth and TLS as one --redis
// URL (or memcached's servers as --memcache), and what both backends
// share: the key prefix and the local cache.
func (e *refEnv) store() {
	shared := []string{"redis", "memcache", "memcache-srv"}
	switch b := strings.ToLower(e.str("BACKEND_TYPE", "redis")); b {
	case "redis", "":
		for _, v := range memcacheVars {
			e.ignore(v, "BACKEND_TYPE is redis")
		}
		e.redis()
	case "memcache":
		e.memcache()
	default:
		e.failUnless(shared, "BACKEND_TYPE", "%q: want redis or memcache", b)
		return
	}
	if v, _ := e.get("CACHE_KEY_PREFIX"); v != "" {
		e.assign("redis-key-prefix", v, nil, "CACHE_KEY_PREFIX")
	}
	if v, ok := e.get("LOCAL_CACHE_SIZE_IN_BYTES"); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || n < 0:
			e.fail("LOCAL_CACHE_SIZE_IN_BYTES", "%q: want a number of bytes", v)
		case n > 0:
			// The reference's local cache remembers over-limit keys until
			// their window ends, and denies them without asking its
			// backend: the engine's (engine.WithLocalCache), a key for
			// each localCacheKeyBytes.
			e.plan.LocalCacheKeys = int(min(max(n/localCacheKeyBytes, 1), engine.MaxLocalCacheKeys))
		}
	}
	e.ignore("EXPIRATION_JITTER_MAX_SECONDS", "sluice's keys expire exactly when their state is back to full")
}

// memcache: BACKEND_TYPE=memcache, MEMCACHE_* onto --memcache*.
func (e *refEnv) memcache() {
	unless := []string{"redis", "memcache", "memcache-srv"}
	hostPort, _ := e.get("MEMCACHE_HOST_PORT")
	srv, _ := e.get("MEMCACHE_SRV")
	switch {
	case hostPort != "" && srv != "":
		e.failUnless(unless, "MEMCACHE_SRV", "set with MEMCACHE_HOST_PORT: set one, as envoyproxy/ratelimit wants")
	case srv != "":
		e.assign("memcache-srv", srv, unless, "BACKEND_TYPE", "MEMCACHE_SRV")
		if v, _ := e.get("MEMCACHE_SRV_REFRESH"); v != "" && v != "0" && v != "0s" {
			e.duration("memcache-srv-refresh", "MEMCACHE_SRV_REFRESH", unless...)
		}
	case hostPort != "":
		e.assign("memcache", hostPort, unless, "BACKEND_TYPE", "MEMCACHE_HOST_PORT")
	default:
		e.failUnless(unless, "BACKEND_TYPE", "memcache needs MEMCACHE_HOST_PORT or MEMCACHE_SRV")
	}
	if hostPort != "" {
		e.ignore("MEMCACHE_SRV_REFRESH", "MEMCACHE_SRV is not set")
	}
	e.assignIfSet("memcache-max-idle-conns", "MEMCACHE_MAX_IDLE_CONNS", unless...)
	tlsVars := []string{"MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION"}
	if e.boolean("MEMCACHE_TLS", false) {
		e.assign("memcache-tls", "true", unless, "MEMCACHE_TLS")
		e.assignIfSet("memcache-tls-ca", "MEMCACHE_TLS_CACERT", unless...)
		e.assignIfSet("memcache-tls-cert", "MEMCACHE_TLS_CLIENT_CERT", unless...)
		e.assignIfSet("memcache-tls-key", "MEMCACHE_TLS_CLIENT_KEY", unless...)
		if e.boolean("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", false) {
			e.assign("memcache-tls-skip-name-check", "true", unless, "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION")
		}
	} else {
		for _, v := range tlsVars {
			e.ignore(v, "MEMCACHE_TLS is not true")
		}
	}
	for _, v := range redisVars {
		e.ignore(v, "BACKEND_TYPE is memcache")
	}
}

// redisVars are the reference's variables of its Redis backend.
var redisVars = []string{"REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL", "REDIS_POOL_SIZE", "REDIS_AUTH", "REDIS_TLS", "REDIS_TLS_CLIENT_CERT",
	"REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "REDIS_PIPELINE_WINDOW",
	"REDIS_PIPELINE_LIMIT", "REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL",
	"REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_SENTINEL_AUTH",
	"REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT",
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "REDIS_TIMEOUT", "REDIS_PERSECOND_TIMEOUT", "REDIS_POOL_ON_EMPTY_BEHAVIOR",
	"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR"}

// redis: BACKEND_TYPE=redis, REDIS_* onto --redis*.
func (e *refEnv) redis() {
	// --redis, or the user's --memcache, drops them.
	redis := []string{"redis", "memcache", "memcache-srv"}
	useTLS := e.boolean("REDIS_TLS", false)
	u, ok := e.redisURL("REDIS_", "/var/run/nutcracker/ratelimit.sock", useTLS)
	if ok {
		e.assign("redis", u, redis[1:], "BACKEND_TYPE", "REDIS_URL", "REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_AUTH", "REDIS_SENTINEL_AUTH", "REDIS_TLS")
	}
	perSecondTLS := e.perSecond()
	// The reference's TLS files serve both Redis clients, whichever uses
	// TLS.
	if useTLS || perSecondTLS {
		e.assignIfSet("redis-tls-ca", "REDIS_TLS_CACERT", redis...)
		e.assignIfSet("redis-tls-cert", "REDIS_TLS_CLIENT_CERT", redis...)
		e.assignIfSet("redis-tls-key", "REDIS_TLS_CLIENT_KEY", redis...)
		if e.boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false) {
			e.assign("redis-tls-skip-name-check", "true", redis, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")
		}
	} else {
		for _, v := range []string{"REDIS_TLS_CACERT", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"} {
			e.ignore(v, "neither REDIS_TLS nor REDIS_PERSECOND_TLS is true")
		}
	}
	if v, _ := e.get("REDIS_TIMEOUT"); v == "0" || v == "0s" {
		e.plan.Ignored = append(e.plan.Ignored, refNote{Var: "REDIS_TIMEOUT", Msg: "0 (no timeout): every Redis call keeps --redis-timeout's deadline"})
	} else {
		e.duration("redis-timeout", "REDIS_TIMEOUT")
	}
	if e.boolean("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false) {
		e.assign("readyz-breaker", "true", nil, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")
	}
	for _, v := range []string{"REDIS_POOL_SIZE", "REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT",
		"REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT"} {
		e.ignore(v, "sluice's Redis client pipelines every call over one connection per node: there is no pool to size, and decisions are the same")
	}
}

// redisURL builds the URL of a Redis from the reference's variables of
// prefix ("REDIS_", or "REDIS_PERSECOND_" for the per-second Redis):
// TYPE, SOCKET_TYPE, URL (def when unset), AUTH and SENTINEL_AUTH, with
// TLS when useTLS.
func (e *refEnv) redisURL(prefix, def string, useTLS bool) (string, bool) {
	addr := e.str(prefix+"URL", def)
	if strings.Contains(addr, "://") {
		e.fail(prefix+"URL", "%q: want envoyproxy/ratelimit's form, host:port (a list for %sTYPE cluster, master,host:port,... for sentinel); a URL goes in SLUICE_%s", addr, prefix, strings.TrimSuffix(prefix, "_"))
		return "", false
	}
	scheme := "redis"
	if useTLS {
		scheme = "rediss"
	}
	userinfo := ""
	if auth, _ := e.get(prefix + "AUTH"); auth != "" {
		userinfo = userInfo(auth).String() + "@"
	}
	hosts := func(list []string) (string, bool) {
		for _, h := range list {
			if _, p, err := net.SplitHostPort(h); err != nil || p == "" {
				e.fail(prefix+"URL", "%q: want host:port", h)
				return "", false
			}
		}
		return strings.Join(list, ","), true
	}
	switch t := strings.ToLower(e.str(prefix+"TYPE", "SINGLE")); t {
	case "single", "":
		switch s := strings.ToLower(e.str(prefix+"SOCKET_TYPE", "unix")); s {
		case "unix":
			if useTLS {
				e.fail(prefix+"TLS", "true with %sSOCKET_TYPE unix: TLS to Redis needs tcp", prefix)
				return "", false
			}
			if !filepath.IsAbs(addr) {
				e.fail(prefix+"URL", "%q: %sSOCKET_TYPE unix wants the socket's absolute path", addr, prefix)
				return "", false
			}
			return "unix://" + userinfo + addr, true
		case "tcp":
			h, ok := hosts([]string{addr})
			return scheme + "://" + userinfo + h, ok
		default:
			e.fail(prefix+"SOCKET_TYPE", "%q: want tcp or unix", s)
			return "", false
		}
	case "cluster":
		h, ok := hosts(strings.Split(addr, ","))
		return scheme + "+cluster://" + userinfo + h, ok
	case "sentinel":
		parts := strings.Split(addr, ",")
		if len(parts) < 2 || parts[0] == "" {
			e.fail(prefix+"URL", "%q: %sTYPE sentinel wants master-name,sentinel-host:port,...", addr, prefix)
			return "", false
		}
		h, ok := hosts(parts[1:])
		q := url.Values{"master": {parts[0]}}
		if sa, _ := e.get(prefix + "SENTINEL_AUTH"); sa != "" {
			user, pass, found := strings.Cut(sa, ":")
			if !found {
				user, pass = "", sa
			}
			if user != "" {
				q.Set("sentinel_user", user)
			}
			q.Set("sentinel_password", pass)
		}
		return scheme + "+sentinel://" + userinfo + h + "?" + q.Encode(), ok
	default:
		e.fail(prefix+"TYPE", "%q: want SINGLE, CLUSTER or SENTINEL", t)
		return "", false
	}
}

// perSecond: REDIS_PERSECOND's second Redis for the limits of unit second,
// as --redis-persecond. It reports whether that Redis uses TLS.
func (e *refEnv) perSecond() bool {
	vars := []string{"REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL",
		"REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_TIMEOUT"}
	if !e.boolean("REDIS_PERSECOND", false) {
		for _, v := range vars {
			e.ignore(v, "REDIS_PERSECOND is not true")
		}
		return false
	}
	useTLS := e.boolean("REDIS_PERSECOND_TLS", false)
	if u, ok := e.redisURL("REDIS_PERSECOND_", "/var/run/nutcracker/ratelimitpersecond.sock", useTLS); ok {
		e.assign("redis-persecond", u, []string{"redis", "memcache", "memcache-srv"}, append([]string{"REDIS_PERSECOND"}, vars[:6]...)...)
	}
	if v, _ := e.get("REDIS_PERSECOND_TIMEOUT"); v == "0" || v == "0s" {
		e.plan.Ignored = append(e.plan.Ignored, refNote{Var: "REDIS_PERSECOND_TIMEOUT", Msg: "0 (no timeout): every call keeps a deadline"})
	} else {
		e.duration("redis-persecond-timeout", "REDIS_PERSECOND_TIMEOUT", "redis", "memcache", "memcache-srv")
	}
	return useTLS
}

// userInfo is REDIS_AUTH's user:password, or a password alone.
func userInfo(auth string) *url.Userinfo {
	if user, pass, found := strings.Cut(auth, ":"); found {
		return url.UserPassword(user, pass)
	}
	return url.UserPassword("", auth)
}

// service: the failure answer, counting, near-limit, response headers,
// shadow and quota modes.
func (e *refEnv) service() {
	// While its Redis fails the reference answers an error (gRPC
	// Unknown), and Envoy's failure_mode_deny decides: --failure-mode
	// error. While its memcached fails, a count it cannot read is 0: each
	// request is decided as if nothing had been counted, and nothing is
	// (--failure-mode uncounted). SLUICE_FAILURE_MODE says otherwise; a
	// rule's failure_mode still wins.
	if strings.EqualFold(e.str("BACKEND_TYPE", "redis"), "memcache") {
		e.assign("failure-mode", "uncounted", nil, "BACKEND_TYPE")
	} else {
		e.assign("failure-mode", "error", nil)
	}
	// The reference counts every hit, also a denied one, unless
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
	counting := "all"
	if e.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false) {
		counting = "admitted"
	}
	e.assign("counting", counting, nil, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
	if v, ok := e.get("NEAR_LIMIT_RATIO"); ok {
		if f, err := strconv.ParseFloat(v, 32); err != nil || f <= 0 || f > 1 {
			e.fail("NEAR_LIMIT_RATIO", "%q: want a number above 0, at most 1", v)
		} else {
			e.assign("near-limit-ratio", v, nil, "NEAR_LIMIT_RATIO")
		}
	}
	if e.boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false) {
		e.assign("response-headers", "true", nil, "LIMIT_RESPONSE_HEADERS_ENABLED")
	}
	e.assignIfSet("limit-header", "LIMIT_LIMIT_HEADER")
	e.assignIfSet("remaining-header", "LIMIT_REMAINING_HEADER")
	e.assignIfSet("reset-header", "LIMIT_RESET_HEADER")
	if e.boolean("SHADOW_MODE", false) {
		e.assign("shadow-mode", "true", nil, "SHADOW_MODE")
	}
	if e.boolean("QUOTA_MODE", false) {
		e.assign("quota-mode", "true", nil, "QUOTA_MODE")
	}
	if e.boolean("RESPONSE_DYNAMIC_METADATA", false) {
		e.assign("response-dynamic-metadata", "true", nil, "RESPONSE_DYNAMIC_METADATA")
	}
}

// stats: the reference's statistics, under its names: pushed to statsd
// (USE_STATSD, the default, over STATSD_PROTOCOL), to a DogStatsD agent
// (USE_DOG_STATSD), served as Prometheus metrics (USE_PROMETHEUS), written
// to the log (none of these), or nowhere (DISABLE_STATS). As in the
// reference, one sink at a time.
func (e *refEnv) stats() {
	if v, ok := e.get("STATS_FLUSH_INTERVAL"); ok {
		if d, err := time.ParseDuration(v); err != nil || d < minStatsFlush || d > maxStatsFlush {
			e.fail("STATS_FLUSH_INTERVAL", "%q: want a duration from %v to %v, such as 10s", v, minStatsFlush, maxStatsFlush)
		} else {
			e.assign("reference-stats-flush-interval", v, nil, "STATS_FLUSH_INTERVAL")
		}
	}
	if v, _ := e.get("EXTRA_TAGS"); v != "" {
		if _, err := refstats.ParseTags(v); err != nil {
			e.fail("EXTRA_TAGS", "%q: %v", v, err)
		} else {
			e.assign("reference-stats-tags", v, nil, "EXTRA_TAGS")
		}
	}
	sinks := []string{"statsd", "statsd-protocol", "statsd-dogstatsd", "statsd-mogrifiers", "reference-stats-prometheus",
		"reference-stats-prometheus-path", "reference-stats-prometheus-mapper", "reference-stats-prometheus-mapper-lenient", "reference-stats-log"}
	dog, prom := e.boolean("USE_DOG_STATSD", false), e.boolean("USE_PROMETHEUS", false)
	// USE_STATSD is true by default; the reference refuses to start with
	// it and another sink, so a deployment that sets another sink sets
	// USE_STATSD=false: its default yields to the other sink here.
	statsd := e.boolean("USE_STATSD", !dog && !prom)
	if e.boolean("DISABLE_STATS", false) {
		e.assign("reference-stats-log", "false", sinks, "DISABLE_STATS")
		return
	}
	if n := btoi(dog) + btoi(statsd) + btoi(prom); n > 1 {
		e.failUnless(sinks, "USE_STATSD", "the statistics go to one sink: set only one of USE_DOG_STATSD, USE_STATSD and USE_PROMETHEUS to true")
		return
	}
	addr := net.JoinHostPort(e.str("STATSD_HOST", "localhost"), e.port("STATSD_PORT", "8125"))
	switch {
	case dog:
		e.assign("statsd", addr, sinks, "USE_DOG_STATSD", "STATSD_HOST", "STATSD_PORT")
		e.assign("statsd-dogstatsd", "true", sinks, "USE_DOG_STATSD")
		e.mogrifiers(sinks)
		e.ignore("STATSD_PROTOCOL", "USE_DOG_STATSD sends over UDP")
	case statsd:
		e.assign("statsd", addr, sinks, "USE_STATSD", "STATSD_HOST", "STATSD_PORT")
		switch p := strings.ToLower(e.str("STATSD_PROTOCOL", "tcp")); p {
		case "tcp", "udp":
			e.assign("statsd-protocol", p, sinks, "STATSD_PROTOCOL")
		case "tcp4", "tcp6", "udp4", "udp6":
			e.assign("statsd-protocol", p[:3], sinks, "STATSD_PROTOCOL")
		default:
			e.fail("STATSD_PROTOCOL", "%q: want tcp or udp", p)
		}
	case prom:
		e.assign("reference-stats-prometheus", e.str("PROMETHEUS_ADDR", ":9090"), sinks, "USE_PROMETHEUS", "PROMETHEUS_ADDR")
		if v, _ := e.get("PROMETHEUS_PATH"); v != "" {
			e.assign("reference-stats-prometheus-path", v, sinks, "PROMETHEUS_PATH")
		}
		if v, _ := e.get("PROMETHEUS_MAPPER_YAML"); v != "" {
			e.assign("reference-stats-prometheus-mapper", v, sinks, "PROMETHEUS_MAPPER_YAML")
			// The reference reads it leniently and ignores its errors.
			e.assign("reference-stats-prometheus-mapper-lenient", "true", sinks, "PROMETHEUS_MAPPER_YAML")
		}
	default:
		e.assign("reference-stats-log", "true", sinks, "USE_STATSD")
	}
	for _, v := range []string{"STATSD_HOST", "STATSD_PORT", "STATSD_PROTOCOL"} {
		if !dog && !statsd {
			e.ignore(v, "the statistics go to no statsd server: USE_STATSD and USE_DOG_STATSD are false")
		}
	}
	for _, v := range []string{"PROMETHEUS_ADDR", "PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML"} {
		if !prom {
			e.ignore(v, "USE_PROMETHEUS is not true")
		}
	}
	if !dog {
		e.ignore("USE_DOG_STATSD_MOGRIFIERS", "USE_DOG_STATSD is not true")
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// mogrifiers reads USE_DOG_STATSD_MOGRIFIERS, a list of names, and each
// name's DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS
// (key:value,...), into --statsd-mogrifiers, in the list's order.
func (e *refEnv) mogrifiers(unless []string) {
	list, _ := e.get("USE_DOG_STATSD_MOGRIFIERS")
	if list == "" {
		return
	}
	var ms []mogrifierJSON
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		p := "DOG_STATSD_MOGRIFIER_" + strings.ToUpper(name) + "_"
		m := mogrifierJSON{Pattern: e.str(p+"PATTERN", ""), Name: e.str(p+"NAME", ""), Tags: map[string]string{}}
		if tags, _ := e.get(p + "TAGS"); tags != "" {
			for pair := range strings.SplitSeq(tags, ",") {
				k, v, ok := strings.Cut(pair, ":")
				if !ok {
					e.fail(p+"TAGS", "%q: want key:value,...", tags)
					return
				}
				m.Tags[k] = v
			}
		}
		if _, err := statsd.NewMogrifier(m.Pattern, m.Name, m.Tags); err != nil {
			e.fail("USE_DOG_STATSD_MOGRIFIERS", "%s (%sPATTERN, %sNAME, %sTAGS): %v", name, p, p, p, err)
			return
		}
		ms = append(ms, m)
	}
	b, err := json.Marshal(ms)
	if err != nil {
		e.fail("USE_DOG_STATSD_MOGRIFIERS", "%v", err)
		return
	}
	e.assign("statsd-mogrifiers", string(b), unless, "USE_DOG_STATSD_MOGRIFIERS")
}

// tracing: TRACING_ENABLED and the variables it reads, onto --tracing-*;
// the endpoint, headers and TLS come from the OTEL_* variables in both.
func (e *refEnv) tracing() {
	if !e.boolean("TRACING_ENABLED", false) {
		for _, v := range []string{"TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE"} {
			e.ignore(v, "TRACING_ENABLED is not true: no traces are exported")
		}
		return
	}
	e.assign("tracing", "true", nil, "TRACING_ENABLED")
	name, _ := e.get("TRACING_SERVICE_NAME")
	if name == "" {
		name = "RateLimit" // the reference's default
	}
	e.assign("tracing-service-name", name, nil, "TRACING_SERVICE_NAME")
	switch p, _ := e.get("TRACING_EXPORTER_PROTOCOL"); p {
	case "", "http":
		e.assign("tracing-protocol", "http/protobuf", nil, "TRACING_EXPORTER_PROTOCOL")
	case "grpc":
		e.assign("tracing-protocol", "grpc", nil, "TRACING_EXPORTER_PROTOCOL")
	default:
		e.fail("TRACING_EXPORTER_PROTOCOL", "%q: want http or grpc", p)
	}
	rate := 1.0
	if v, ok := e.get("TRACING_SAMPLING_RATE"); ok && v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r != r {
			e.fail("TRACING_SAMPLING_RATE", "%q: want a number (1 samples every trace, 0 none)", v)
		} else {
			rate = min(max(r, 0), 1) // as the reference: >= 1 always, <= 0 never
		}
	}
	e.assign("tracing-sample-ratio", strconv.FormatFloat(rate, 'g', -1, 64), nil, "TRACING_SAMPLING_RATE")
	e.assignIfSet("tracing-service-namespace", "TRACING_SERVICE_NAMESPACE")
	// Unset, the reference gives each process a random UUID; sluice too,
	// unless OTEL_RESOURCE_ATTRIBUTES names the instance.
	id, _ := e.get("TRACING_SERVICE_INSTANCE_ID")
	if id == "" && !otelNamesInstance(e.str("OTEL_RESOURCE_ATTRIBUTES", "")) {
		id = randomUUID()
	}
	if id != "" {
		e.assign("tracing-service-instance-id", id, nil, "TRACING_SERVICE_INSTANCE_ID")
	}
}

// otelNamesInstance reports whether attrs, an OTEL_RESOURCE_ATTRIBUTES
// value (key=value,...), sets service.instance.id.
func otelNamesInstance(attrs string) bool {
	for kv := range strings.SplitSeq(attrs, ",") {
		if k, _, ok := strings.Cut(kv, "="); ok && strings.TrimSpace(k) == "service.instance.id" {
			return true
		}
	}
	return false
}

// randomUUID is a random (version 4) UUID in its usual text form.
func randomUUID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	x := hex.EncodeToString(b[:])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

// refMode is --reference-env: when serve reads the reference's variables.
type refMode struct {
	mode string // auto, on or off
	// What parse applied, for the start-up log.
	on        bool
	applied   []refAssign
	overruled []refAssign // dropped: the user set the flag
	ignored   []refNote
	// keyPrefix: --redis-key-prefix was given (by CACHE_KEY_PREFIX, a
	// flag or a SLUICE_* variable), not its default.
	keyPrefix bool
	// localCacheKeys: the plan's LocalCacheKeys.
	localCacheKeys int
}

func (m *refMode) String() string {
	if m == nil || m.mode == "" {
		return "auto"
	}
	return m.mode
}

func (m *refMode) Set(s string) error {
	switch s {
	case "auto", "on", "off":
		m.mode = s
		return nil
	}
	return errors.New("want auto, on or off")
}

// active reports whether the reference's variables apply: on, or auto with
// one of refTriggers set.
func (m *refMode) active(lookup func(string) (string, bool)) bool {
	switch m.String() {
	case "on":
		return true
	case "off":
		return false
	}
	return slices.ContainsFunc(refTriggers, func(v string) bool { _, ok := lookup(v); return ok })
}

// apply applies the reference's environment to fs's flags that the user
// did not set (set holds those set by a flag or a SLUICE_* variable).
func (m *refMode) apply(fs *flag.FlagSet, set map[string]bool, lookup func(string) (string, bool)) error {
	if !m.active(lookup) {
		return nil
	}
	m.on = true
	m.keyPrefix = set["redis-key-prefix"]
	plan := referencePlan(lookup)
	isSet := func(flags []string) bool { return slices.ContainsFunc(flags, func(f string) bool { return set[f] }) }
	var errs []string
	for _, n := range plan.Errors {
		if !isSet(n.Unless) {
			errs = append(errs, n.Var+": "+n.Msg)
		}
	}
	for _, a := range plan.Assign {
		if set[a.Flag] || isSet(a.Unless) {
			m.overruled = append(m.overruled, a)
			continue
		}
		// Every flag of the plan is one of serve's
		// (TestReferencePlanFlagsExist).
		if err := fs.Lookup(a.Flag).Value.Set(a.Value); err != nil {
			name := a.Var
			if a.Default {
				name = "the default of " + name
			}
			errs = append(errs, fmt.Sprintf("%s: invalid value %q for --%s: %v", name, a.Value, a.Flag, err))
			continue
		}
		m.applied = append(m.applied, a)
		m.keyPrefix = m.keyPrefix || a.Flag == "redis-key-prefix"
	}
	m.ignored = plan.Ignored
	m.localCacheKeys = plan.LocalCacheKeys
	if len(errs) > 0 {
		return fmt.Errorf("envoyproxy/ratelimit's environment variables (--reference-env %s): %s", m, strings.Join(errs, "; "))
	}
	return nil
}

// log tells which of the reference's variables configure serve, at warn so
// that the reference's default LOG_LEVEL shows it.
func (m *refMode) log(log *slog.Logger) {
	if !m.on {
		return
	}
	var applied, defaults []string
	for _, a := range m.applied {
		s := "--" + a.Flag + "=" + redactValue(a.Flag, a.Value)
		if a.Default {
			defaults = append(defaults, s)
		} else {
			applied = append(applied, a.Var+" → "+s)
		}
	}
	if m.localCacheKeys > 0 {
		applied = append(applied, fmt.Sprintf("LOCAL_CACHE_SIZE_IN_BYTES → a local cache of up to %d over-limit keys", m.localCacheKeys))
	}
	attrs := []any{"applied", strings.Join(applied, "; ")}
	if len(defaults) > 0 {
		attrs = append(attrs, "defaults", strings.Join(defaults, " "))
	}
	log.Warn("configured by envoyproxy/ratelimit's environment variables (--reference-env "+m.String()+"); flags and SLUICE_* variables win", attrs...)
	for _, a := range m.overruled {
		if !a.Default {
			log.Info("envoyproxy/ratelimit variable overruled by a flag or SLUICE_* variable", "var", a.Var, "flag", "--"+a.Flag)
		}
	}
	for _, n := range m.ignored {
		log.Warn("envoyproxy/ratelimit variable ignored", "var", n.Var, "reason", n.Msg)
	}
}

// redactValue hides the password of a --redis (or --redis-persecond) URL
// in the log.
func redactValue(flagName, v string) string {
	if flagName != "redis" && flagName != "redis-persecond" {
		return v
	}
	u, err := url.Parse(v)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// referenceKeys reports whether the fixed windows of whole seconds count
// under envoyproxy/ratelimit's item names in memcached: under its
// environment with memcached as the store, so that a fleet moving between
// the two in either direction keeps its counts. prefix starts each name,
// as the reference's CACHE_KEY_PREFIX does (empty unless
// --redis-key-prefix was given).
func (f *serveFlags) referenceKeys() (prefix string, on bool) {
	if !f.runtime.refEnv.on || !f.redis.memcache.set() {
		return "", false
	}
	if f.runtime.refEnv.keyPrefix {
		prefix = f.redis.keyPrefix
	}
	return prefix, true
}
