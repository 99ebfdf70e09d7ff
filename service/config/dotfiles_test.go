package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestDotFiles: without DotFiles, names starting with "." are skipped;
// with it, dot files and dot directories are read as envoyproxy/ratelimit
// reads them with RUNTIME_IGNOREDOTFILES=false, but a dot symbolic link to
// a directory is not followed. Names starting with ".." (Kubernetes'
// atomic writer: ..data and the timestamped directory, a second copy of
// each file of a ConfigMap volume) are skipped either way, so that a
// ConfigMap mount loads its domains once.
func TestDotFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, domain string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("domain: "+domain+"\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("plain.yaml", "plain")
	write(".hidden.yaml", "hidden")
	write(".sub/inner.yml", "inner")
	write(".swp", "not-yaml")
	if err := os.Symlink(".sub", filepath.Join(dir, ".link")); err != nil {
		t.Fatal(err)
	}
	rel := func(fs []string) []string {
		var out []string
		for _, f := range fs {
			r, _ := filepath.Rel(dir, f)
			out = append(out, r)
		}
		return out
	}
	got, err := Options{}.Files(dir)
	if want := []string{"plain.yaml"}; err != nil || !slices.Equal(rel(got), want) {
		t.Errorf("Files without DotFiles = %v, %v; want %v", rel(got), err, want)
	}
	got, err = Options{DotFiles: true}.Files(dir)
	if want := []string{".hidden.yaml", ".sub/inner.yml", "plain.yaml"}; err != nil || !slices.Equal(rel(got), want) {
		t.Errorf("Files with DotFiles = %v, %v; want %v", rel(got), err, want)
	}
	c, err := Options{DotFiles: true}.Load(dir)
	if err != nil || !slices.Equal(c.Domains(), []string{"hidden", "inner", "plain"}) {
		t.Errorf("Load with DotFiles: %v", err)
	}

	// A ConfigMap volume: config.yaml -> ..data/config.yaml, ..data -> ..2026_12_02.
	cm := t.TempDir()
	ts := filepath.Join(cm, "..2026_12_02")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	dir = ts
	write("config.yaml", "cm")
	if err := os.Symlink("..2026_12_02", filepath.Join(cm, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/config.yaml", filepath.Join(cm, "config.yaml")); err != nil {
		t.Fatal(err)
	}
	if c, err := (Options{}).Load(cm); err != nil || !slices.Equal(c.Domains(), []string{"cm"}) {
		t.Errorf("ConfigMap without DotFiles: %v", err)
	}
	if c, err := (Options{DotFiles: true}).Load(cm); err != nil || !slices.Equal(c.Domains(), []string{"cm"}) {
		t.Errorf("ConfigMap with DotFiles: %v; want the domain once (the atomic writer's copy skipped)", err)
	}
}
