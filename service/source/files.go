package source

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/livefile"
)

// Files is the configuration from files: loaded at start, and reloaded on
// SIGHUP and whenever their content changes. With no Paths, it is the
// built-in example, which never changes.
type Files struct {
	// Paths are the configuration files and directories (config.Load's).
	Paths []string
	// Interval is how often to look for a change of content; 0 reloads on
	// SIGHUP only.
	Interval time.Duration
	// Options are how the files are read (wildcards, merged domains, the
	// entries bound).
	Options config.Options
	// Read is told of every read of the files, at Load and at each reload
	// (when they changed, or forced): how many files there are, and
	// whether they could not be read (a file that reads but does not
	// load is the Applier's error); nil: none. envoyproxy/ratelimit's
	// runtime loader counts its reads so.
	Read func(files int, failed bool)

	// sum is the fingerprint of the files last loaded, or tried: a broken
	// file is reported once, not at every Interval. Only Load, then Run's
	// goroutine, touch it.
	sum [32]byte
}

// Load loads the configuration to start with: the files, or the built-in
// example with no Paths. Their fingerprint is taken before they are read,
// so that a change in between is reloaded.
func (f *Files) Load() (*config.Config, error) {
	if len(f.Paths) == 0 {
		return f.Options.Parse("built-in example", config.DefaultExample())
	}
	var n int
	var err error
	f.sum, n, err = fingerprint(f.Options, f.Paths)
	f.read(n, err)
	return f.Options.Load(f.Paths...)
}

// read tells Read.
func (f *Files) read(n int, err error) {
	if f.Read != nil {
		f.Read(n, err != nil)
	}
}

// Origin is the origin of the configuration last loaded.
func (f *Files) Origin() Origin {
	if len(f.Paths) == 0 {
		return Origin{"builtin", "example"}
	}
	return Origin{"file", fileVersion(f.sum)}
}

// Run reloads the configuration through a, on SIGHUP and when the files
// change, until ctx ends. It runs also with no Paths, so that SIGHUP does
// not end the process (it is logged, and nothing is reloaded). A
// configuration that fails to load leaves the running one in force.
func (f *Files) Run(ctx context.Context, a *Applier) {
	log := a.logger()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var tick <-chan time.Time
	if f.Interval > 0 && len(f.Paths) > 0 {
		t := time.NewTicker(f.Interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if len(f.Paths) == 0 {
				log.Info("SIGHUP: no --config, nothing to reload")
				continue
			}
			log.Info("SIGHUP: reloading configuration")
			f.reload(a, true)
		case <-tick:
			f.reload(a, false)
		}
	}
}

// reload loads the configuration when forced or when the files changed,
// and puts it in force through a.
func (f *Files) reload(a *Applier, force bool) {
	sum, n, err := fingerprint(f.Options, f.Paths)
	if err == nil && sum == f.sum && !force {
		return
	}
	f.read(n, err)
	f.sum = sum
	c, err := f.Options.Load(f.Paths...)
	if err := a.Reload(c, err, f.Origin()); err != nil {
		a.logger().Error("configuration reload failed; keeping the running configuration", "err", err)
	}
}

// fingerprint hashes the names and contents of the configuration files,
// and counts them.
func fingerprint(o config.Options, paths []string) ([32]byte, int, error) {
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
	files, err := o.Files(paths...)
	if err != nil {
		firstErr = err
		h.Write([]byte("error:" + err.Error()))
	}
	for _, f := range files {
		add(f)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum, len(files), firstErr
}

// fileVersion is the version of a configuration loaded from files: the
// start of its fingerprint.
func fileVersion(sum [32]byte) string { return hex.EncodeToString(sum[:6]) }
