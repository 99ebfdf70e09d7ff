package status

import (
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/service/config"
)

// fmtFloat writes f exactly (the shortest form that reads back the same).
func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// describe is a rule's row in the rules table.
func describe(r *config.Rule) ruleView {
	v := ruleView{Name: r.Name}
	switch {
	case r.Unlimited:
		v.Limit, v.Algorithm = "unlimited", "-"
	case r.Deny:
		v.Limit, v.Algorithm = "deny all", "-"
	default:
		v.Limit = strconv.FormatInt(int64(r.Limit.Rate), 10) + " per " + period(r.Limit.Period)
		v.Algorithm = r.Limit.Algorithm.String()
	}
	var modes []string
	for _, m := range [...]struct {
		on   bool
		name string
	}{{r.ShadowMode, "shadow"}, {r.QuotaMode, "quota"}, {r.DetailedMetric, "detailed_metric"}, {r.ValueToMetric, "value_to_metric"}, {r.ShareThreshold, "share_threshold"}} {
		if m.on {
			modes = append(modes, m.name)
		}
	}
	v.Modes = strings.Join(modes, ", ")
	return v
}

func period(d time.Duration) string {
	for _, u := range [...]struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "day"}, {time.Hour, "hour"}, {time.Minute, "minute"}, {time.Second, "second"}} {
		if d == u.d {
			return u.name
		}
	}
	return d.String()
}

var funcs = template.FuncMap{
	"num": fmtFloat,
	"pct": func(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" },
	"rate": func(f float64) string {
		if f >= 100 {
			return strconv.FormatFloat(f, 'f', 0, 64)
		}
		return strconv.FormatFloat(f, 'f', 2, 64)
	},
	"ms":     func(s float64) string { return strconv.FormatFloat(1000*s, 'f', 3, 64) + " ms" },
	"sparkW": func() float64 { return sparkW },
	"sparkH": func() float64 { return sparkH },
}

var page = template.Must(template.New("status").Funcs(funcs).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{{.Refresh}}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sluice status — {{.Replica}}</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5rem;color:#1d2330;background:#f6f7f9}
h1{font-size:1.3rem;margin:0 0 .2rem}h2{font-size:1.05rem;margin:1.6rem 0 .5rem}
.sub{color:#5b6475;margin-bottom:1rem}
.cards{display:flex;gap:1rem;flex-wrap:wrap}
.card{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:.7rem 1rem;min-width:11rem}
.card b{display:block;font-size:1.25rem}
.ok{color:#17803d}.bad{color:#c0262d}.muted{color:#8a93a3}
table{border-collapse:collapse;background:#fff;border:1px solid #dde1e7;min-width:40rem}
th,td{padding:.35rem .7rem;border-bottom:1px solid #eceef2;text-align:left;vertical-align:top}
th{background:#eef0f4;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
code{font:12px ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
svg polyline{fill:none;stroke:#3b6fd8;stroke-width:1.5}
</style>
</head>
<body>
<h1>sluice status</h1>
<div class="sub">replica <code id="replica" data-replica="{{.Replica}}">{{.Replica}}</code> · {{.Now}} · refreshes every {{.Refresh}}s · numbers are this replica's</div>

<div class="cards">
<div class="card" id="ready" data-ready="{{.Ready}}">readiness<b class="{{if .Ready}}ok{{else}}bad{{end}}">{{if .Ready}}ready{{else}}not ready{{end}}</b>{{if .ReadyErr}}<span class="muted">{{.ReadyErr}}</span>{{end}}</div>
<div class="card" id="breaker" data-breaker="{{if not .HasBreaker}}none{{else if .BreakerOpen}}open{{else}}closed{{end}}">shared store breaker<b class="{{if .BreakerOpen}}bad{{else}}ok{{end}}">{{if not .HasBreaker}}<span class="muted">no shared store</span>{{else if .BreakerOpen}}open{{else}}closed{{end}}</b></div>
<div class="card" id="latency"{{if .HasLatency}} data-p50="{{num .P50}}" data-p99="{{num .P99}}" data-calls="{{num .StoreCalls}}"{{end}}>store latency p50 / p99<b>{{if .HasLatency}}{{ms .P50}} / {{ms .P99}}{{else}}<span class="muted">no call yet</span>{{end}}</b><span class="muted">{{if .HasLatency}}over {{num .StoreCalls}} calls since start{{end}}</span></div>
</div>

<h2>Decisions per rule</h2>
{{if .Decisions}}<table id="decisions">
<tr><th>domain</th><th>rule</th><th>decisions/s</th><th>trend</th><th>over limit/s</th><th>decisions</th><th>over limit</th><th>over-limit share</th></tr>
{{range .Decisions}}<tr class="decision" data-domain="{{.Domain}}" data-rule="{{.Rule}}" data-total="{{num .Total}}" data-over="{{num .Over}}" data-share="{{num .Share}}" data-rate="{{num .Rate}}">
<td>{{.Domain}}</td><td><code>{{.Rule}}</code></td><td class="n">{{rate .Rate}}</td>
<td><svg width="{{sparkW}}" height="{{sparkH}}" viewBox="0 0 {{sparkW}} {{sparkH}}" role="img" aria-label="decisions per second, peak {{rate .Peak}}"><line x1="0" y1="{{sparkH}}" x2="{{sparkW}}" y2="{{sparkH}}" stroke="#dde1e7" stroke-width="2"/><polyline points="{{.Spark}}"/></svg></td>
<td class="n">{{rate .OverRate}}</td><td class="n">{{num .Total}}</td><td class="n">{{num .Over}}</td><td class="n">{{pct .Share}}</td></tr>
{{end}}</table>
<p class="muted">Rates over the last {{.Interval}}s sample; totals and shares since start (sluice_rls_decisions_total).</p>
{{else}}<p class="muted">No decision yet.</p>{{end}}

<h2>Keys denied most</h2>
{{if .Top}}<p class="muted">Over the last one to two windows of {{.TopWindow}}s (since {{.TopFrom}}). A count overestimates by at most its error; the true count is between count − error and count.</p>
<table id="top">
<tr><th>domain</th><th>rule</th><th>denials</th><th>key</th><th>count</th><th>error</th></tr>
{{range .Top}}{{$r := .}}{{range $i, $k := .Keys}}<tr class="topkey" data-domain="{{$r.Domain}}" data-rule="{{$r.Rule}}" data-key="{{$k.Key}}" data-count="{{$k.Count}}" data-error="{{$k.Error}}">
{{if eq $i 0}}<td rowspan="{{len $r.Keys}}">{{$r.Domain}}</td><td rowspan="{{len $r.Keys}}"><code>{{$r.Rule}}</code></td><td class="n" rowspan="{{len $r.Keys}}" data-denials="{{$r.Denials}}">{{$r.Denials}}</td>{{end}}
<td><code>{{$k.Key}}</code></td><td class="n">{{$k.Count}}</td><td class="n">{{$k.Error}}</td></tr>
{{end}}{{end}}</table>
{{else}}<p class="muted">No key denied in the window.</p>{{end}}

<h2>Rules loaded</h2>
{{if .Rules}}<table id="rules">
<tr><th>rule</th><th>limit</th><th>algorithm</th><th>modes</th></tr>
{{range .Rules}}<tr class="rule" data-rule="{{.Name}}"><td><code>{{.Name}}</code></td><td>{{.Limit}}</td><td>{{.Algorithm}}</td><td>{{.Modes}}</td></tr>
{{end}}</table>
{{else}}<p class="muted">No rule loaded.</p>{{end}}
</body>
</html>
`))
