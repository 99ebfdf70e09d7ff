package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice"
)

//go:embed lua/*.lua
var luaFS embed.FS

// script is one Lua script and its SHA-1, called with EVALSHA.
type script struct {
	name string
	src  string
	sha  string
}

func newScript(name string, parts ...string) *script {
	var b strings.Builder
	for _, p := range parts {
		src, err := luaFS.ReadFile("lua/" + p + ".lua")
		if err != nil {
			panic("redisstore: missing embedded script " + p) // a build error, not input
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	sum := sha1.Sum([]byte(b.String()))
	return &script{name: name, src: b.String(), sha: hex.EncodeToString(sum[:])}
}

// newBatchScript wraps every flat script as a function of the batch driver,
// after the functions that the flat scripts and the driver share
// (read_state.lua and the rest_<algorithm>.lua files).
func newBatchScript() *script {
	var b strings.Builder
	done := map[string]bool{"": true}
	for _, f := range append([]string{"read_state"}, restFiles[:]...) {
		if done[f] {
			continue
		}
		done[f] = true
		src, err := luaFS.ReadFile("lua/" + f + ".lua")
		if err != nil {
			panic("redisstore: missing embedded script " + f)
		}
		b.Write(src)
	}
	b.WriteString("local DECIDE = {}\n")
	first := map[string]int{} // the kind that first ran each file
	for k := sluice.FixedWindow; k <= kindMsLog; k++ {
		if j, ok := first[algFiles[k]]; ok {
			fmt.Fprintf(&b, "DECIDE[%d] = DECIDE[%d]\n", k, j)
			continue
		}
		first[algFiles[k]] = int(k)
		src, err := luaFS.ReadFile("lua/" + algFiles[k] + ".lua")
		if err != nil {
			panic("redisstore: missing embedded script " + algFiles[k])
		}
		fmt.Fprintf(&b, "DECIDE[%d] = function(KEYS, ARGV, ...)\n%s\nend\n", k, src)
	}
	drv, err := luaFS.ReadFile("lua/batch.lua")
	if err != nil {
		panic("redisstore: missing embedded script batch")
	}
	b.Write(drv)
	sum := sha1.Sum([]byte(b.String()))
	return &script{name: "batch", src: b.String(), sha: hex.EncodeToString(sum[:])}
}

// restFiles names the at-rest admission (rest_<algorithm>.lua) that a
// kind's flat script calls, when it has one.
var restFiles = [...]string{
	sluice.FixedWindow:   "rest_fixed_window",
	sluice.SlidingWindow: "rest_sliding_window",
	sluice.TokenBucket:   "rest_gcra",
	sluice.GCRA:          "rest_gcra",
	kindMsLog:            "",
}

// kindMsLog numbers the sliding log in the millisecond layout
// (WithMillisecondLayout) in the scripts; the other kinds are numbered as
// sluice.Algorithm.
const kindMsLog = 6

// algFiles names each kind's script: the token bucket is kept as a TAT
// (internal/algo.Bucket), so it runs GCRA's scripts, under its own key
// letter (lib_gcra.lua sets ALG[4] to ALG[5]).
var algFiles = [...]string{
	sluice.FixedWindow:   "fixed_window",
	sluice.SlidingLog:    "sliding_log",
	sluice.SlidingWindow: "sliding_window",
	sluice.TokenBucket:   "gcra",
	sluice.GCRA:          "gcra",
	kindMsLog:            "ms_log",
}

// The scripts: one flat script per algorithm for single decisions (the hot
// path: no closures or tables per call), and one for AllowMulti and one for
// Return, both built from lib.lua and the lib_<algorithm>.lua functions.
// The differential tests hold both forms to internal/algo.
var (
	singleScripts [kindMsLog + 1]*script
	multiScript   *script
	returnScript  *script
	batchScript   *script
)

func init() {
	all := []string{"lib"}
	for k := sluice.FixedWindow; k <= kindMsLog; k++ {
		name := algFiles[k]
		if k < kindMsLog {
			name = sluice.Algorithm(k).String()
		}
		parts := []string{algFiles[k]}
		if restFiles[k] != "" {
			parts = append([]string{"read_state", restFiles[k]}, parts...)
		}
		singleScripts[k] = newScript(name, parts...)
		if k != sluice.TokenBucket {
			all = append(all, "lib_"+algFiles[k])
		}
	}
	multiScript = newScript("multi", append(all, "multi")...)
	returnScript = newScript("return", append(all, "return")...)
	batchScript = newBatchScript()
}
