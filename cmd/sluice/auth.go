package main

import (
	"flag"
	"fmt"

	"github.com/sluicehq/sluice/service/server"
)

const defaultAuthDescriptors = "remote_address=X-Forwarded-For|X-Real-Ip,path=X-Original-URI|X-Forwarded-Uri,api_key=X-Api-Key"

// authFlags say how GET /v1/auth turns a request into descriptors, and how
// it denies.
type authFlags struct {
	domain      string
	descriptors string
	denyStatus  int
	identity    identityFlags
}

func (g *authFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.domain, "auth-domain", "example", "domain of GET /v1/auth requests")
	fs.StringVar(&g.descriptors, "auth-descriptors", defaultAuthDescriptors, "descriptors of GET /v1/auth, `key=Header|Header,...`: a key is valued by the first of its headers present (and left out when none is); remote_address, and a key naming X-Forwarded-For, Forwarded or X-Real-Ip, is the client's address, read from those headers only when the peer is in --trusted-proxies")
	fs.IntVar(&g.denyStatus, "auth-deny-status", 429, "HTTP `status` of a GET /v1/auth denial (403 for nginx auth_request, which turns 429 into 500)")
	g.identity.register(fs)
}

func (g *authFlags) validate() error {
	if g.denyStatus < 400 || g.denyStatus > 599 {
		return fmt.Errorf("--auth-deny-status %d: want a 4xx or 5xx status", g.denyStatus)
	}
	return g.identity.validate()
}

// auth is the server.Auth of validated flags; it parses --auth-descriptors.
func (g *authFlags) auth() (server.Auth, error) {
	sources, err := server.ParseAuthSources(g.descriptors)
	if err != nil {
		return server.Auth{}, fmt.Errorf("--auth-descriptors: %v", err)
	}
	return server.Auth{Domain: g.domain, Sources: sources, DenyStatus: g.denyStatus, Identity: g.identity.identity()}, nil
}
