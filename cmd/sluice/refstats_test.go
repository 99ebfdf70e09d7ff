package main

import (
	"bytes"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/service/metrics"
)

// TestMapperLenient: a mapping file with a key outside statsd_exporter's
// language is a start-up error, unless lenient (as the reference reads
// it), where the key is ignored; a file that does not load is an error,
// unless lenient, where nothing is mapped and a warning says why.
func TestMapperLenient(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	misspelt := write("misspelt.yaml", "mappings:\n- match: a.*\n  name: a\n  lables: {x: $1}\n")
	broken := write("broken.yaml", "mappings:\n- match: a.*\n  match_type: nope\n")
	flags := func(args ...string) (*refStatsFlags, error) {
		var g refStatsFlags
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		g.register(fs)
		if err := fs.Parse(append([]string{"--reference-stats-prometheus=127.0.0.1:0"}, args...)); err != nil {
			t.Fatal(err)
		}
		return &g, g.validate()
	}
	for _, f := range []string{misspelt, broken} {
		if _, err := flags("--reference-stats-prometheus-mapper=" + f); err == nil || !strings.Contains(err.Error(), "--reference-stats-prometheus-mapper") {
			t.Errorf("%s, strict: %v, want an error naming the flag", filepath.Base(f), err)
		}
	}
	g, err := flags("--reference-stats-prometheus-mapper="+misspelt, "--reference-stats-prometheus-mapper-lenient")
	if err != nil || g.mapperErr != nil {
		t.Fatalf("misspelt, lenient: %v, %v; want loaded", err, g.mapperErr)
	}
	if _, ok := g.mapping.Map("a.b", "counter"); !ok {
		t.Error("misspelt, lenient: its mapping does not match a.b")
	}
	g, err = flags("--reference-stats-prometheus-mapper="+broken, "--reference-stats-prometheus-mapper-lenient")
	if err != nil || g.mapperErr == nil {
		t.Fatalf("broken, lenient: %v, %v; want started with the reason kept", err, g.mapperErr)
	}
	if _, ok := g.mapping.Map("ratelimit.service.rate_limit.d.k.total_hits", "counter"); ok {
		t.Error("broken, lenient: a statistic was mapped, want none (every one keeps its name)")
	}
	var log bytes.Buffer
	r, err := g.start(slog.New(slog.NewTextHandler(&log, nil)), &log, metrics.New())
	if err != nil {
		t.Fatal(err)
	}
	r.close(time.Now().Add(10 * time.Second))
	if !strings.Contains(log.String(), "does not load") || !strings.Contains(log.String(), "broken.yaml") {
		t.Errorf("broken, lenient: log %q, want a warning naming the file", log.String())
	}
}
