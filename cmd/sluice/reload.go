package main

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/service/admin"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/livefile"
	"github.com/sluicehq/sluice/service/server"
)

// reloader reloads the configuration when its files change (checked every
// interval, by content) and on SIGHUP. A configuration that fails to load
// leaves the running one in force.
type reloader struct {
	paths    []string
	interval time.Duration
	log      *slog.Logger
	metrics  *server.Metrics
	info     *admin.ConfigState // nil: none
	apply    func(*config.Config)
	check    func(*config.Config) error // nil: none; an error keeps the running configuration
	sum      [32]byte
}

// startReloader reloads the configuration into the service, on SIGHUP and
// when its files change, until stop is called. It runs also without
// --config, so that SIGHUP does not kill the process.
func startReloader(g *configFlags, sum [32]byte, check func(*config.Config) error, c *core) (stop func()) {
	r := &reloader{paths: g.paths(), interval: g.reloadInterval, log: c.log, metrics: c.metrics, info: c.config, apply: c.eng.SetConfig, sum: sum, check: check}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.run(ctx) })
	return func() {
		cancel()
		wg.Wait()
	}
}

func (r *reloader) run(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var tick <-chan time.Time
	if r.interval > 0 && len(r.paths) > 0 {
		t := time.NewTicker(r.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if len(r.paths) == 0 {
				r.log.Info("SIGHUP: no --config, nothing to reload")
				continue
			}
			r.log.Info("SIGHUP: reloading configuration")
			r.reload(true)
		case <-tick:
			r.reload(false)
		}
	}
}

// reload loads the configuration when forced or when the files changed.
func (r *reloader) reload(force bool) {
	sum, err := fingerprint(r.paths)
	if err == nil && sum == r.sum && !force {
		return
	}
	r.sum = sum // a broken file is reported once, not every interval
	c, lerr := config.Load(r.paths...)
	if lerr == nil && r.check != nil {
		lerr = r.check(c)
	}
	if lerr != nil {
		r.metrics.Reloaded(lerr)
		r.info.Failed(lerr, time.Now())
		r.log.Error("configuration reload failed; keeping the running configuration", "err", lerr)
		return
	}
	r.apply(c)
	r.metrics.Reloaded(nil)
	r.metrics.ConfigLoaded("file", fileVersion(sum), time.Now())
	r.info.Loaded("file", fileVersion(sum), time.Now())
	r.log.Info("configuration reloaded", "domains", strings.Join(c.Domains(), ","))
}

// fingerprint hashes the names and contents of the configuration files.
func fingerprint(paths []string) ([32]byte, error) {
	h := sha256.New()
	var firstErr error
	add := func(name string) {
		b, err := livefile.Read(name, config.MaxFileSize) // never blocks: a named pipe is refused
		if err != nil && firstErr == nil {
			firstErr = err
		}
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write(b)
		h.Write([]byte{0})
	}
	files, err := config.Files(paths...)
	if err != nil {
		firstErr = err
		h.Write([]byte("error:" + err.Error()))
	}
	for _, f := range files {
		add(f)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum, firstErr
}
