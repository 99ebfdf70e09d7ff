package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/service/metrics"
	"github.com/sluicehq/sluice/service/refstats"
	"github.com/sluicehq/sluice/service/statsd"
	"github.com/sluicehq/sluice/service/statsmap"
)

// refStatsFlags say where envoyproxy/ratelimit's statistics go, under its
// names: a statsd server (plain or DogStatsD), a Prometheus endpoint of
// their own through a statsd_exporter mapping, or the log. With none set,
// they are not kept.
type refStatsFlags struct {
	statsd     string
	protocol   string
	dog        bool
	mogrifiers string
	tags       string
	flush      time.Duration
	prom       string
	promPath   string
	mapper     string
	lenient    bool
	log        bool

	// Read by validate.
	parsedTags refstats.Tags
	mogs       []statsd.Mogrifier
	mapping    *statsmap.Mapper
	// mapperErr is why a lenient mapper file maps nothing (logged at start).
	mapperErr error
}

// Bounds of the flush interval.
const (
	minStatsFlush = 100 * time.Millisecond
	maxStatsFlush = time.Hour
)

func (g *refStatsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.statsd, "statsd", "", "send envoyproxy/ratelimit's statistics, under its names (ratelimit.service.rate_limit.<domain>.<key>.total_hits, ...), to the statsd server at `host:port` (the reference's USE_STATSD, STATSD_HOST, STATSD_PORT)")
	fs.StringVar(&g.protocol, "statsd-protocol", "", "`protocol` of --statsd: tcp (the default) or udp; udp with --statsd-dogstatsd (the reference's STATSD_PROTOCOL)")
	fs.BoolVar(&g.dog, "statsd-dogstatsd", false, "send --statsd's statistics in the DogStatsD format, over UDP, the tags as |#key:value (the reference's USE_DOG_STATSD)")
	fs.StringVar(&g.mogrifiers, "statsd-mogrifiers", "", "DogStatsD mogrifiers, a JSON `list` [{\"pattern\": regexp, \"name\": template, \"tags\": {key: template}}]: the first whose pattern matches a statistic's name rewrites it, $1... its groups (the reference's USE_DOG_STATSD_MOGRIFIERS and DOG_STATSD_MOGRIFIER_*)")
	fs.StringVar(&g.tags, "reference-stats-tags", "", "`key:value,...` tags of every statistic of --statsd, --reference-stats-prometheus and --reference-stats-log (the reference's EXTRA_TAGS)")
	fs.DurationVar(&g.flush, "reference-stats-flush-interval", 10*time.Second, "how often the statistics' counters and gauges are sent (the reference's STATS_FLUSH_INTERVAL), 100ms to 1h")
	fs.StringVar(&g.prom, "reference-stats-prometheus", "", "serve envoyproxy/ratelimit's statistics as its Prometheus metrics (ratelimit_service_rate_limit_total_hits{domain,key1,key2}, ...), with sluice's own, on a listener at `host:port` (the reference's USE_PROMETHEUS, PROMETHEUS_ADDR)")
	fs.StringVar(&g.promPath, "reference-stats-prometheus-path", "/metrics", "`path` of --reference-stats-prometheus (the reference's PROMETHEUS_PATH)")
	fs.StringVar(&g.mapper, "reference-stats-prometheus-mapper", "", "statsd_exporter mapping `file` of --reference-stats-prometheus instead of the reference's default mapping (the reference's PROMETHEUS_MAPPER_YAML)")
	fs.BoolVar(&g.lenient, "reference-stats-prometheus-mapper-lenient", false, "read --reference-stats-prometheus-mapper as the reference does: keys outside statsd_exporter's language are ignored, and a file that does not load maps nothing (every statistic keeps its own name; a warning is logged) instead of a start-up error")
	fs.BoolVar(&g.log, "reference-stats-log", false, "write the statistics to stderr as JSON lines at every flush, as the reference does when no other sink is on (USE_STATSD=false)")
}

// mogrifierJSON is one of --statsd-mogrifiers.
type mogrifierJSON struct {
	Pattern string            `json:"pattern"`
	Name    string            `json:"name"`
	Tags    map[string]string `json:"tags"`
}

// maxMogrifiers bounds --statsd-mogrifiers.
const maxMogrifiers = 64

func (g *refStatsFlags) validate() error {
	if g.statsd != "" {
		if _, _, err := net.SplitHostPort(g.statsd); err != nil {
			return fmt.Errorf("--statsd %q: want host:port", g.statsd)
		}
	}
	switch {
	case g.protocol != "" && g.protocol != "tcp" && g.protocol != "udp":
		return fmt.Errorf("--statsd-protocol %q: want tcp or udp", g.protocol)
	case g.dog && g.protocol == "tcp":
		return errors.New("--statsd-dogstatsd sends over UDP: --statsd-protocol tcp does not apply")
	case (g.dog || g.protocol != "") && g.statsd == "":
		return errors.New("--statsd-protocol and --statsd-dogstatsd need --statsd")
	case g.mogrifiers != "" && !g.dog:
		return errors.New("--statsd-mogrifiers needs --statsd-dogstatsd")
	case g.flush < minStatsFlush || g.flush > maxStatsFlush:
		return fmt.Errorf("--reference-stats-flush-interval %v: want %v to %v", g.flush, minStatsFlush, maxStatsFlush)
	case !strings.HasPrefix(g.promPath, "/"):
		return fmt.Errorf("--reference-stats-prometheus-path %q: want a path starting with /", g.promPath)
	case g.mapper != "" && g.prom == "":
		return errors.New("--reference-stats-prometheus-mapper needs --reference-stats-prometheus")
	}
	var err error
	if g.parsedTags, err = refstats.ParseTags(g.tags); err != nil {
		return fmt.Errorf("--reference-stats-tags: %v", err)
	}
	if g.mogrifiers != "" {
		var ms []mogrifierJSON
		dec := json.NewDecoder(strings.NewReader(g.mogrifiers))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ms); err != nil {
			return fmt.Errorf("--statsd-mogrifiers: %v", err)
		}
		if len(ms) > maxMogrifiers {
			return fmt.Errorf("--statsd-mogrifiers: %d mogrifiers, want at most %d", len(ms), maxMogrifiers)
		}
		g.mogs = g.mogs[:0]
		for i, m := range ms {
			mg, err := statsd.NewMogrifier(m.Pattern, m.Name, m.Tags)
			if err != nil {
				return fmt.Errorf("--statsd-mogrifiers[%d]: %v", i, err)
			}
			g.mogs = append(g.mogs, mg)
		}
	}
	if g.prom != "" {
		if _, _, err := net.SplitHostPort(g.prom); err != nil {
			return fmt.Errorf("--reference-stats-prometheus %q: want host:port", g.prom)
		}
		data := statsmap.DefaultMapping
		parse := statsmap.Parse
		if g.lenient {
			parse = statsmap.ParseLenient
		}
		if g.mapper != "" {
			data, err = readBounded(g.mapper, statsmap.MaxMappingBytes)
		}
		if err == nil {
			g.mapping, err = parse(data)
		}
		switch {
		case err != nil && g.lenient:
			g.mapperErr = fmt.Errorf("--reference-stats-prometheus-mapper %s: %v", g.mapper, err)
			if g.mapping, err = statsmap.Parse(nil); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("--reference-stats-prometheus-mapper %s: %v", g.mapper, err)
		}
	}
	return nil
}

// readBounded reads a file of at most max bytes.
func readBounded(name string, max int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: more than %d bytes", name, max)
	}
	return b, nil
}

// on reports whether any sink is set.
func (g *refStatsFlags) on() bool { return g.statsd != "" || g.prom != "" || g.log }

// refStats are the reference's statistics while serve runs: fed by the
// engine (an engine.Observer), the gRPC calls (Interceptor) and the
// configurations loaded, flushed every --reference-stats-flush-interval.
type refStats struct {
	*refstats.Stats
	store    *refstats.Store
	client   *statsd.Client     // nil without --statsd
	exporter *statsmap.Exporter // nil without --reference-stats-prometheus
	promAddr string
	promPath string
	cancel   context.CancelFunc
	done     chan struct{}
}

// start makes the statistics and their sinks and starts flushing them; nil
// when no sink is set. m is sluice's metrics: the statsd client counts its
// lines there, and the Prometheus endpoint serves them too.
func (g *refStatsFlags) start(log *slog.Logger, stderr io.Writer, m *metrics.Metrics) (*refStats, error) {
	if !g.on() {
		return nil, nil
	}
	if g.mapperErr != nil {
		log.Warn("the Prometheus mapping file does not load: every statistic keeps its own name, as envoyproxy/ratelimit does", "err", g.mapperErr)
	}
	r := &refStats{promAddr: g.prom, promPath: g.promPath, done: make(chan struct{})}
	var sinks refstats.Sinks
	if g.statsd != "" {
		o := statsd.Options{Network: g.protocol, Addr: g.statsd, Log: log, Metrics: statsd.NewMetrics(m.Registry())}
		var enc statsd.Encoder = statsd.Plain{}
		if g.dog {
			// As DataDog's client: UDP, and a packet sent every 100 ms.
			o.Network, o.FlushInterval, enc = "udp", 100*time.Millisecond, statsd.Dog{Mogrifiers: g.mogs}
		}
		c, err := statsd.New(o)
		if err != nil {
			return nil, err
		}
		r.client = c
		sinks = append(sinks, statsd.NewSink(c, enc))
	}
	if g.prom != "" {
		r.exporter = statsmap.NewExporter(g.mapping)
		sinks = append(sinks, r.exporter)
	}
	if g.log {
		sinks = append(sinks, refstats.NewLogSink(stderr))
	}
	var sink refstats.Sink = sinks
	if len(sinks) == 1 {
		sink = sinks[0]
	}
	r.store = refstats.NewStore(sink)
	r.Stats = refstats.New(r.store, g.parsedTags)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		r.store.Run(ctx, g.flush)
	}()
	return r, nil
}

// prometheus reports whether the statistics are served as Prometheus
// metrics.
func (r *refStats) prometheus() bool { return r != nil && r.exporter != nil }

// promServer is the Prometheus endpoint of --reference-stats-prometheus
// (nil without it): the reference's metrics, then sluice's own (m), at its
// path only.
func (r *refStats) promServer(m *metrics.Metrics) http.Handler {
	if !r.prometheus() {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle(r.promPath, r.exporter.Handler(m.Registry()))
	return mux
}

// close flushes the statistics a last time and sends what is queued to the
// statsd server, by deadline.
func (r *refStats) close(deadline time.Time) {
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
	if r.client != nil {
		r.client.Close(max(time.Until(deadline), 0))
	}
}

// interceptor counts the gRPC calls; nil when the statistics are off.
func (r *refStats) interceptor() []grpc.UnaryServerInterceptor {
	if r == nil {
		return nil
	}
	return []grpc.UnaryServerInterceptor{r.UnaryInterceptor()}
}
