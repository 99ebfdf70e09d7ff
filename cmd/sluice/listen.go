package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/service/certs"
	"github.com/sluicehq/sluice/service/listen"
)

// listenFlags are the addresses serve listens on, and the file that tells
// them once it does.
type listenFlags struct {
	http, grpc string
	admin      string
	debugAddr  string // deprecated alias of admin that keeps /metrics on the data plane
	readyFile  string
}

func (g *listenFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.http, "http", ":8080", "HTTP listen `address`")
	fs.StringVar(&g.grpc, "grpc", ":8081", "gRPC listen `address`")
	fs.StringVar(&g.admin, "admin", "", "serve /metrics and /debug/pprof on this `address`, apart from the data plane, which then answers only decisions and health (off when empty: /metrics stays on --http)")
	fs.StringVar(&g.debugAddr, "debug-addr", "", "deprecated: use --admin. Serves the admin endpoints on this `address` and keeps /metrics on --http too")
	fs.StringVar(&g.readyFile, "ready-file", "", "write {\"http\":ADDR,\"grpc\":ADDR} to this `file` once listening")
}

func (g *listenFlags) validate() error {
	if g.admin != "" && g.debugAddr != "" {
		return errors.New("--debug-addr is a deprecated name of --admin: set only --admin")
	}
	return nil
}

// adminAddr is the admin listener's address, and whether /metrics leaves the
// data plane.
func (g *listenFlags) adminAddr() (addr string, split bool) {
	if g.admin != "" {
		return g.admin, true
	}
	return g.debugAddr, false
}

// listeners are serve's sockets, capped and, with --tls-cert, TLS.
type listeners struct {
	http, grpc, admin net.Listener // admin nil when off
}

// listen opens the listeners, with tf's --max-connections and
// --conn-write-timeout, with TLS
// when c is not nil (on gRPC's only with grpcOnly); on an error it closes
// those already open.
func (g *listenFlags) listen(tf *transportFlags, cm *connMetrics, c *certs.Server, grpcOnly bool, adminTLS func(*tls.Config) *tls.Config) (*listeners, error) {
	var ls listeners
	open := func(flagName, name, addr string, protos ...string) (net.Listener, error) {
		var cfg *tls.Config
		if c != nil && (!grpcOnly || name == "grpc") {
			cfg = c.Config(protos...)
			if name == "admin" {
				cfg = adminTLS(cfg)
			}
		}
		l, err := listen.Listen(addr, tf.listenOptions(name, cm), cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flagName, err)
		}
		return l, nil
	}
	var err error
	if ls.http, err = open("--http", "http", g.http, "h2", "http/1.1"); err != nil {
		return nil, err
	}
	if ls.grpc, err = open("--grpc", "grpc", g.grpc, "h2"); err != nil {
		ls.http.Close()
		return nil, err
	}
	if adminAddr, _ := g.adminAddr(); adminAddr != "" {
		flagName := "--admin"
		if g.admin == "" {
			flagName = "--debug-addr"
		}
		if ls.admin, err = open(flagName, "admin", adminAddr, "h2", "http/1.1"); err != nil {
			ls.http.Close()
			ls.grpc.Close()
			return nil, err
		}
	}
	return &ls, nil
}

// addrs are the listeners' addresses, for --ready-file.
func (ls *listeners) addrs() map[string]string {
	m := map[string]string{"http": ls.http.Addr().String(), "grpc": ls.grpc.Addr().String()}
	if ls.admin != nil {
		m["admin"] = ls.admin.Addr().String()
	}
	return m
}

// writeReadyFile writes the listeners' addresses to path as JSON, at once
// (a reader never sees half of it).
func writeReadyFile(path string, addrs map[string]string) error {
	b, _ := json.Marshal(addrs)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".sluice-ready-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
