// Package source puts sluice serve's configuration in force and keeps it
// current: from files (Files: loaded at start, reloaded on SIGHUP and when
// they change) or from an xDS control plane (XDS: every update the control
// plane sends). Whatever its source, a configuration goes through one
// Applier: vetted, set in the engine, recorded in the metrics and in the
// admin API's information, and logged.
package source

import (
	"log/slog"
	"strings"
	"time"

	"github.com/sluicehq/sluice/service/admin"
	"github.com/sluicehq/sluice/service/config"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/metrics"
)

// Origin says where a configuration came from, as sluice_config_info and
// the admin API tell it: its source ("file", "xds", "builtin") and its
// version (the xDS version_info, or a fingerprint of the files).
type Origin struct{ Source, Version string }

// Applier puts configurations in force. Its fields are set before it is
// first used, and not changed after; its methods are safe for concurrent
// use.
type Applier struct {
	// Engine decides by the configuration in force. Start does not need
	// it (the engine is made with the configuration Start vetted); Reload
	// does.
	Engine *engine.Engine
	// Check vets a configuration before it is put in force (nil: none):
	// the rules of the process that no file can know, such as a rule
	// failing open with no share to fail open with. An error keeps the
	// configuration in force.
	Check func(*config.Config) error
	// Metrics records the configuration in force and the reloads
	// (sluice_config_info, sluice_config_reloads_total, ...); nil: none.
	Metrics *metrics.Metrics
	// Info records them for the admin API (GET /admin/v1/config); nil:
	// none.
	Info *admin.ConfigState
	// Log tells each configuration put in force; nil: none.
	Log *slog.Logger
}

// vet runs the Check.
func (a *Applier) vet(c *config.Config) error {
	if a.Check == nil {
		return nil
	}
	return a.Check(c)
}

// Start vets c, the configuration the process starts with, and records it
// as in force. An error (c fails the Check) is for the process to exit
// with: nothing is recorded then.
func (a *Applier) Start(c *config.Config, o Origin) error {
	if err := a.vet(c); err != nil {
		return err
	}
	a.record(o, time.Now())
	return nil
}

// Reload puts c in force in place of the running configuration, as a
// reload: loadErr is the error of loading it (c is ignored then), else the
// Check vets it. A failed reload keeps the running configuration, is
// counted and recorded (sluice_config_last_reload_successful 0, the admin
// API's last_reload_error) and returned, for the source to tell in its
// way (a log line, an xDS NACK). A configuration put in force is counted,
// recorded and logged.
func (a *Applier) Reload(c *config.Config, loadErr error, o Origin) error {
	err := loadErr
	if err == nil {
		err = a.vet(c)
	}
	if err != nil {
		if a.Metrics != nil {
			a.Metrics.Reloaded(err)
		}
		a.Info.Failed(err, time.Now())
		return err
	}
	a.Engine.SetConfig(c)
	if a.Metrics != nil {
		a.Metrics.Reloaded(nil)
	}
	a.record(o, time.Now())
	a.logger().Info("configuration loaded from "+o.Source, "version", o.Version, "domains", strings.Join(c.Domains(), ","))
	return nil
}

// logger is a's Log, or one that discards.
func (a *Applier) logger() *slog.Logger {
	if a.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Log
}

// record records o as the configuration in force since at.
func (a *Applier) record(o Origin, at time.Time) {
	if a.Metrics != nil {
		a.Metrics.ConfigLoaded(o.Source, o.Version, at)
	}
	a.Info.Loaded(o.Source, o.Version, at)
}
