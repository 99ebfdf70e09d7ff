// Package admin is the admin listener's HTTP API: /metrics and
// /debug/pprof, and the operators' endpoints under /admin/v1 (inspect and
// reset a rate limit's state, the loaded configuration), behind one
// authentication: a client certificate (mTLS), a bearer token from a file,
// or, with neither configured, loopback callers only.
package admin
