package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"go.yaml.in/yaml/v3"
)

var (
	rateLimitKeys = []string{"unit", "unit_multiplier", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "window", "burst", "failure_mode", "counting"}
	replacesKeys  = []string{"name"}
)

// unitList lists the units' names in lower case, shortest first, with last
// before the last one: "second, minute, …, month or year".
func unitList(last string) string {
	var b strings.Builder
	for i, u := range units {
		switch {
		case i == len(units)-1:
			b.WriteString(last)
		case i > 0:
			b.WriteString(", ")
		}
		b.WriteString(strings.ToLower(u.Name))
	}
	return b.String()
}

// rateLimits parses a rate_limits list into child's rules; the errors are
// noted.
func (p *parser) rateLimits(child *node, f *field, path string, flags descFlags) {
	items, err := p.sequence(f.v, path)
	if err != nil {
		p.note(err)
		return
	}
	if len(items) == 0 {
		p.note(p.errorf(f.k, path, "empty list: give at least one limit or drop the key"))
		return
	}
	type id struct {
		a sluice.Algorithm
		p time.Duration
	}
	seen := map[id]int{}
	for i, item := range items {
		ip := index(path, i)
		r, ok := p.rateLimit(item, ip, child.path+"#"+strconv.Itoa(i), flags)
		if p.stopped {
			return
		}
		if !ok {
			continue
		}
		if r == nil {
			n, _ := p.resolve(item, ip)
			if p.note(p.errorf(n, ip, "empty limit")) {
				return
			}
			continue
		}
		if !r.Unlimited {
			k := id{r.Limit.Algorithm, r.Limit.Period}
			if j, ok := seen[k]; ok {
				n, _ := p.resolve(item, ip)
				if p.note(p.errorf(n, ip, "same algorithm and period (%v, %v) as %s: one key holds one state per algorithm and period; keep the stricter limit", k.a, k.p, index(path, j))) {
					return
				}
				continue
			}
			seen[k] = i
		}
		child.rules = append(child.rules, r)
	}
}

// rateLimit parses one rate_limit object. name is the generated rule name.
// A null rate_limit gives nil: no limit, as the reference. ok is false when
// an error was noted.
func (p *parser) rateLimit(n *yaml.Node, path, name string, flags descFlags) (_ *Rule, ok bool) {
	errs := len(p.errs)
	r, err := p.rateLimitFields(n, path, name, flags)
	p.note(err)
	if len(p.errs) > errs || p.stopped {
		return nil, false
	}
	return r, true
}

// rateLimitFields is rateLimit's parse. It notes the errors of single
// keys and goes on to the next key; it returns the first error of the
// limit as a whole.
func (p *parser) rateLimitFields(n *yaml.Node, path, name string, flags descFlags) (*Rule, error) {
	fields, err := p.mapping(n, path)
	if err != nil {
		return nil, err
	}
	if fields == nil {
		rn, _ := p.resolve(n, path)
		if rn.Kind == yaml.MappingNode { // {}: the reference rejects its empty unit
			return nil, p.errorf(rn, join(path, "unit"), "missing: want one of %s (or a window)", unitList(", "))
		}
		return nil, nil
	}
	r := flags.rule(name)
	k, err := p.readLimit(fields, path, r)
	if err != nil {
		return nil, err
	}
	if err := p.checkRule(r, k, path); err != nil {
		return nil, err
	}
	if r.Unlimited {
		if err := p.checkUnlimited(k, path); err != nil {
			return nil, err
		}
		return r, nil
	}
	if err := p.period(r, k, n, path); err != nil {
		return nil, err
	}
	if err := p.limit(r, k, n, path); err != nil {
		return nil, err
	}
	return r, nil
}

// rule returns a rule called name with the descriptor's flags.
func (f descFlags) rule(name string) *Rule {
	return &Rule{
		Name:           name,
		ShadowMode:     f.shadow,
		QuotaMode:      f.quota,
		DetailedMetric: f.detailed,
		ValueToMetric:  f.valueToMetric,
		ShareThreshold: f.shareThreshold,
	}
}

// limitKeys are the keys of one rate_limit as read, before the limit is
// built from them. A nil field is a key not given.
type limitKeys struct {
	unit, mult, rate, replaces  *field
	alg, window, burst, failure *field
	counting                    *field
	extension                   []*field // the sluice keys given, in file order

	unitName, windowS, algName, failureName, countingName string
	rateV, multV, burstV                                  int64
}

// readLimit reads the keys of a rate_limit: the rule's own (unlimited, name,
// replaces) into r, the limit's into the result. It notes the error of each
// key and goes on to the next; errStopped means that an error was noted.
func (p *parser) readLimit(fields []field, path string, r *Rule) (*limitKeys, error) {
	errs := len(p.errs)
	k := &limitKeys{}
	stop := p.eachKey(fields, path, func(f *field, fp string) (err error) {
		switch f.key {
		case "unit":
			k.unit = f
			k.unitName, err = p.str(f.v, fp)
		case "unit_multiplier":
			k.mult = f
			k.multV, err = p.integer(f.v, fp, 0, math.MaxUint32)
		case "requests_per_unit":
			k.rate = f
			k.rateV, err = p.integer(f.v, fp, 0, math.MaxUint32)
		case "unlimited":
			r.Unlimited, err = p.boolean(f.v, fp)
		case "name":
			var configured string
			if configured, err = p.str(f.v, fp); err == nil && configured != "" {
				r.Name = configured
				r.ConfiguredName = configured
			}
		case "replaces":
			k.replaces = f
			r.Replaces, err = p.replaces(f.v, fp)
		case "algorithm":
			k.alg = f
			k.extension = append(k.extension, f)
			k.algName, err = p.str(f.v, fp)
		case "window":
			k.window = f
			k.extension = append(k.extension, f)
			k.windowS, err = p.str(f.v, fp)
		case "burst":
			k.burst = f
			k.extension = append(k.extension, f)
			k.burstV, err = p.integer(f.v, fp, 0, math.MaxInt32)
		case "failure_mode":
			k.failure = f
			k.extension = append(k.extension, f)
			k.failureName, err = p.str(f.v, fp)
		case "counting":
			k.counting = f
			k.extension = append(k.extension, f)
			k.countingName, err = p.str(f.v, fp)
		default:
			err = p.unknown(f, path, rateLimitKeys)
		}
		return err
	})
	if stop || len(p.errs) > errs {
		return nil, errStopped // noted
	}
	return k, nil
}

// checkRule checks what every rule must satisfy, unlimited or not: it does
// not replace itself, and its unit, when given, is known.
func (p *parser) checkRule(r *Rule, k *limitKeys, path string) error {
	for _, rp := range r.Replaces {
		if r.ConfiguredName != "" && rp == r.ConfiguredName {
			return p.errorf(k.replaces.k, join(path, "replaces"), "a rule must not replace itself (%q)", rp)
		}
	}
	if k.unit != nil && k.unitName != "" {
		if _, ok := LookupUnit(k.unitName); !ok {
			return p.errorf(k.unit.v, join(path, "unit"), "unknown unit %q (want %s)", k.unitName, unitList(" or "))
		}
	}
	return nil
}

// checkUnlimited refuses the keys of a limit on an unlimited rule.
func (p *parser) checkUnlimited(k *limitKeys, path string) error {
	if k.unit != nil && k.unitName != "" {
		return p.errorf(k.unit.k, join(path, "unit"), "must not be set when unlimited")
	}
	extension := k.extension
	if k.mult != nil {
		extension = append(extension, k.mult)
	}
	if len(extension) > 0 {
		f := extension[0]
		return p.errorf(f.k, join(path, f.key), "must not be set when unlimited")
	}
	return nil
}

// period sets r's period: the window, or the unit times unit_multiplier.
// n is the rate_limit.
func (p *parser) period(r *Rule, k *limitKeys, n *yaml.Node, path string) error {
	switch {
	case k.window != nil && k.unit != nil:
		return p.errorf(k.window.k, join(path, "window"), "give unit or window, not both")
	case k.window != nil && k.mult != nil:
		return p.errorf(k.mult.k, join(path, "unit_multiplier"), "applies to unit, not to window")
	case k.window != nil:
		d, err := time.ParseDuration(k.windowS)
		if err != nil || d <= 0 {
			return p.errorf(k.window.v, join(path, "window"), "want a positive duration such as 30s or 5m, got %q", k.windowS)
		}
		r.Limit.Period = d
	case k.unit == nil || k.unitName == "":
		at := n
		if k.unit != nil {
			at = k.unit.v
		}
		return p.errorf(at, join(path, "unit"), "missing: want one of %s (or a window)", unitList(", "))
	default:
		u, _ := LookupUnit(k.unitName) // known: checkRule
		r.Unit, r.Limit.Period = u.Name, u.Period
		if k.mult != nil {
			if k.multV < 1 {
				return p.errorf(k.mult.v, join(path, "unit_multiplier"), "must be >= 1, got %d", k.multV)
			}
			if k.multV > int64(math.MaxInt64/r.Limit.Period) {
				return p.errorf(k.mult.v, join(path, "unit_multiplier"), "%d %s is too long", k.multV, strings.ToLower(r.Unit)+"s")
			}
			r.Limit.Period *= time.Duration(k.multV)
		}
	}
	return nil
}

// limit sets the rest of r's limit (its algorithm, rate, burst and failure
// mode; the period is set) and validates it. n is the rate_limit.
func (p *parser) limit(r *Rule, k *limitKeys, n *yaml.Node, path string) error {
	r.Limit.Algorithm = sluice.FixedWindow
	if k.alg != nil {
		a, err := sluice.ParseAlgorithm(k.algName)
		if err != nil {
			return p.errorf(k.alg.v, join(path, "algorithm"), "%s", reason(err))
		}
		r.Limit.Algorithm = a
	}
	r.Limit.Rate = int(k.rateV)
	r.Limit.Burst = int(k.burstV)
	if k.failure != nil {
		m, err := failureMode(k.failureName)
		if err != nil {
			return p.errorf(k.failure.v, join(path, "failure_mode"), "%v", err)
		}
		r.Limit.FailureMode = m
	}
	if k.counting != nil {
		c, err := sluice.ParseCounting(k.countingName)
		if err != nil || k.countingName == "" {
			return p.errorf(k.counting.v, join(path, "counting"), "want admitted or all, got %q", k.countingName)
		}
		r.Limit.Counting, r.CountingSet = c, true
	}
	check := r.Limit
	if k.rateV == 0 {
		// requests_per_unit: 0 is the reference's block-all limit: check the
		// rest of the limit with a stand-in rate.
		check.Rate = 1
		r.Deny = true
	}
	if err := check.Validate(); err != nil {
		at, fp := k.limitField(err, n, path)
		return p.errorf(at, fp, "%s", reason(err))
	}
	return nil
}

// failureMode parses a failure_mode: closed, error, open, uncounted, or
// empty for the process's default.
func failureMode(s string) (sluice.FailureMode, error) {
	m, err := sluice.ParseFailureMode(s)
	if err == nil && (s == "" || m == sluice.FailOpen || m == sluice.FailClosed || m == sluice.FailError || m == sluice.FailUncounted) {
		return m, nil
	}
	return 0, fmt.Errorf("want closed, error, open or uncounted, got %q", s)
}

// limitField returns the node and the key path that an invalid limit's
// error is about: the key of the field it names when that key is given,
// else the rate_limit n as a whole.
func (k *limitKeys) limitField(err error, n *yaml.Node, path string) (*yaml.Node, string) {
	var le *sluice.LimitError
	if !errors.As(err, &le) {
		return n, path
	}
	var f *field
	switch le.Field {
	case "Burst":
		f = k.burst
	case "Period":
		f = k.window
	case "Rate":
		f = k.rate
	case "Counting":
		f = k.counting
	}
	if f == nil {
		return n, path
	}
	return f.v, join(path, f.key)
}

// reason is the message of an invalid limit's error without its sentinel's
// text: the field and the offending value.
func reason(err error) string {
	var le *sluice.LimitError
	if errors.As(err, &le) {
		return le.Reason
	}
	return err.Error()
}

// replaces parses a replaces list: mappings with a non-empty name.
func (p *parser) replaces(n *yaml.Node, path string) ([]string, error) {
	items, err := p.sequence(n, path)
	if err != nil {
		return nil, err
	}
	var names []string
	for i, item := range items {
		ip := index(path, i)
		fields, err := p.mapping(item, ip)
		if err != nil {
			return nil, err
		}
		name := ""
		for j := range fields {
			f := &fields[j]
			if f.key != "name" {
				return nil, p.unknown(f, ip, replacesKeys)
			}
			if name, err = p.str(f.v, join(ip, "name")); err != nil {
				return nil, err
			}
		}
		if name == "" {
			in, _ := p.resolve(item, ip)
			return nil, p.errorf(in, join(ip, "name"), "missing or empty: a replaces entry names the rule it replaces")
		}
		names = append(names, name)
	}
	return names, nil
}
