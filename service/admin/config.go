package admin

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/service/config"
)

// ConfigInfo describes the configuration in force.
type ConfigInfo struct {
	Source   string    // "file", "xds" or "builtin"
	Version  string    // the xDS version_info, or a fingerprint of the files
	LoadedAt time.Time // when it was loaded
	// LastError is the error of the last reload or xDS update, when it
	// failed after the configuration in force was loaded ("" otherwise),
	// and LastErrorAt its time.
	LastError   string
	LastErrorAt time.Time
}

// ConfigState holds the ConfigInfo of the configuration in force; the
// process updates it on each load and failed reload. A nil *ConfigState
// ignores updates. It is safe for concurrent use.
type ConfigState struct{ p atomic.Pointer[ConfigInfo] }

// Loaded records a configuration put in force.
func (s *ConfigState) Loaded(source, version string, at time.Time) {
	if s == nil {
		return
	}
	s.p.Store(&ConfigInfo{Source: source, Version: version, LoadedAt: at})
}

// Failed records a reload or update that failed (the configuration in
// force stays).
func (s *ConfigState) Failed(err error, at time.Time) {
	if s == nil || err == nil {
		return
	}
	for {
		old := s.p.Load()
		var c ConfigInfo
		if old != nil {
			c = *old
		}
		c.LastError, c.LastErrorAt = err.Error(), at
		if s.p.CompareAndSwap(old, &c) {
			return
		}
	}
}

// Info returns the ConfigInfo in force (the zero value before any load).
func (s *ConfigState) Info() ConfigInfo {
	if s == nil {
		return ConfigInfo{}
	}
	if c := s.p.Load(); c != nil {
		return *c
	}
	return ConfigInfo{}
}

// configJSON is the answer of GET /admin/v1/config.
type configJSON struct {
	Source      string     `json:"source,omitempty"`
	Version     string     `json:"version,omitempty"`
	LoadedAt    *time.Time `json:"loaded_at,omitempty"`
	Domains     []string   `json:"domains"`
	Rules       []ruleJSON `json:"rules"`
	LastError   string     `json:"last_reload_error,omitempty"`
	LastErrorAt *time.Time `json:"last_reload_error_at,omitempty"`
}

// ruleJSON is a configured rule.
type ruleJSON struct {
	Name           string   `json:"name"`
	ConfiguredName string   `json:"configured_name,omitempty"`
	Algorithm      string   `json:"algorithm,omitempty"`
	Rate           int      `json:"rate"`
	Period         string   `json:"period,omitempty"`
	Unit           string   `json:"unit,omitempty"`
	Burst          int      `json:"burst,omitempty"`
	Counting       string   `json:"counting,omitempty"`
	FailureMode    string   `json:"failure_mode,omitempty"`
	Unlimited      bool     `json:"unlimited,omitempty"`
	Deny           bool     `json:"deny,omitempty"`
	ShadowMode     bool     `json:"shadow_mode,omitempty"`
	QuotaMode      bool     `json:"quota_mode,omitempty"`
	Replaces       []string `json:"replaces,omitempty"`
}

func ruleOf(r *config.Rule) ruleJSON {
	j := ruleJSON{Name: r.Name, ConfiguredName: r.ConfiguredName, Unit: r.Unit, Unlimited: r.Unlimited,
		Deny: r.Deny, ShadowMode: r.ShadowMode, QuotaMode: r.QuotaMode, Replaces: r.Replaces}
	if !r.Unlimited {
		l := r.Limit
		j.Algorithm, j.Rate, j.Period, j.Burst = l.Algorithm.String(), l.Rate, l.Period.String(), l.Burst
		j.FailureMode = l.FailureMode.String()
		if r.CountingSet {
			j.Counting = l.Counting.String()
		}
	}
	return j
}

// configuration is GET /admin/v1/config.
func (a *api) configuration(w http.ResponseWriter, r *http.Request) {
	ci := a.config.Info()
	out := configJSON{Source: ci.Source, Version: ci.Version, LastError: ci.LastError, Domains: []string{}, Rules: []ruleJSON{}}
	if !ci.LoadedAt.IsZero() {
		t := ci.LoadedAt.UTC()
		out.LoadedAt = &t
	}
	if !ci.LastErrorAt.IsZero() {
		t := ci.LastErrorAt.UTC()
		out.LastErrorAt = &t
	}
	if c := a.eng.Config(); c != nil {
		out.Domains = c.Domains()
		for _, rule := range c.Rules() {
			out.Rules = append(out.Rules, ruleOf(rule))
		}
	}
	writeJSON(w, out)
}
