package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

//go:embed lua/*.lua
var luaFS embed.FS

// script is one Lua script and its SHA-1, called with EVALSHA.
type script struct {
	name string
	src  string
	sha  string
}

// The scripts are assembled when the package initialises from one file per
// algorithm (lua/<algorithm>.lua: its step, or for the logs its decision
// and its write, and its Return), one shared prologue (lua/prologue.lua:
// the test clock's ARGV, Redis TIME, formatting helpers) and one driver per
// script: single.lua (single_log.lua for the logs) decides one AllowN,
// batch.lua a batch of them, multi.lua an AllowMulti, return.lua a Return
// (reset.lua, Reset's DEL, stands alone).
// So each algorithm is written once, and the differential tests that hold
// every script to internal/algo hold that one definition. The batch, multi
// and return scripts call the algorithms' functions; the single scripts,
// AllowN's hot path, hold them as inline code (inline.go), since a function
// defined in a script is a closure made at every run. Assembling in Go at
// init, rather than generating files, keeps one copy of each script's
// source in the repository, and the scripts' SHA-1s follow it.
var (
	singleScripts [kindCharge + int(sluice.GCRA) + 1]*script
	multiScript   *script
	returnScript  *script
	batchScript   *script
	resetScript   *script
)

// kindMsLog numbers the sliding log in the millisecond layout
// (WithMillisecondLayout) in the scripts; the other kinds are numbered as
// sluice.Algorithm.
const kindMsLog = 6

// kindCharge is added to the kind of a limit that counts every hit
// (sluice.CountAll): kinds 7, 9, 10 and 11 are the fixed window, sliding
// window, token bucket and GCRA running their algorithm's charge
// (<prefix>_charge) instead of its step. The sliding log cannot count
// every hit (sluice.Limit.Validate).
const kindCharge = 6

// baseKind is the kind of a charging kind's algorithm.
func baseKind(kind int) int {
	if kind > kindCharge {
		return kind - kindCharge
	}
	return kind
}

// isCharge reports whether kind counts every hit.
func isCharge(kind int) bool { return kind > kindCharge }

// algFiles names each kind's file and the prefix of its functions: the
// token bucket is kept as a TAT (internal/algo.Bucket), so it runs GCRA's
// step, under its own key letter.
var algFiles = [...]struct{ file, prefix string }{
	sluice.FixedWindow:   {"fixed_window", "fw"},
	sluice.SlidingLog:    {"sliding_log", "sl"},
	sluice.SlidingWindow: {"sliding_window", "sw"},
	sluice.TokenBucket:   {"gcra", "gcra"},
	sluice.GCRA:          {"gcra", "gcra"},
	kindMsLog:            {"ms_log", "ms"},
}

// isLog reports whether kind keeps a log (a ZSET) rather than a counter
// value: its script decides and then writes, instead of stepping a value.
func isLog(kind int) bool { return kind == int(sluice.SlidingLog) || kind == kindMsLog }

// luaFile returns an embedded script file.
func luaFile(name string) string {
	src, err := luaFS.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("redisstore: missing embedded script " + name) // a build error, not input
	}
	return string(src)
}

// head is the start of every script: the index in ARGV of the test
// clock's time (ta, read by the prologue), and the constants of
// internal/algo (and MaxMillisecondUnits) that the scripts use, under their
// Go names in Lua's case (algo.MaxCountDebt is MAX_COUNT_DEBT), so that a
// script reads as its Go.
func head(ta int) string {
	return fmt.Sprintf("local TA = %d\nlocal MAX_EXACT, MAX_COUNT_DEBT, MAX_BUCKET_DEBT, LOG_RETURN_DEPTH, MAX_MILLISECOND_UNITS = %d, %d, %d, %d, %d\n",
		ta, int64(algo.MaxExact), int64(algo.MaxCountDebt), int64(algo.MaxBucketDebt), algo.LogReturnDepth, MaxMillisecondUnits)
}

// assemble builds a script: head, the prologue, files, then the driver.
func assemble(name string, ta int, files []string, driver string) *script {
	var b strings.Builder
	b.WriteString(head(ta))
	b.WriteString(luaFile("prologue"))
	for _, f := range files {
		b.WriteString(luaFile(f))
	}
	b.WriteString(luaFile(driver))
	return newScript(name, b.String())
}

// assembleSingle builds kind's single script, with its algorithm's
// functions written inline (inline.go).
func assembleSingle(name string, kind int) *script {
	a := algFiles[baseKind(kind)]
	funcs, rest := splitFuncs(luaFile("prologue") + luaFile(a.file))
	driver, alias := "single", map[string]string{"STEP": a.prefix + "_step"}
	if isCharge(kind) {
		alias["STEP"] = a.prefix + "_charge"
	}
	if isLog(kind) {
		driver, alias = "single_log", map[string]string{"DECIDE": a.prefix + "_decide", "WRITE": a.prefix + "_write"}
	}
	// ARGV: n, the limit's values, then the test clock's time.
	return newScript(name, head(2+limitValues(kind))+inlineScript(rest, funcs, alias, luaFile(driver)))
}

func newScript(name, src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{name: name, src: src, sha: hex.EncodeToString(sum[:])}
}

func init() {
	var all []string
	for k := sluice.FixedWindow; k <= kindMsLog; k++ {
		name := algFiles[k].file
		if k < kindMsLog {
			name = sluice.Algorithm(k).String()
		}
		singleScripts[k] = assembleSingle(name, int(k))
		if k != sluice.TokenBucket {
			all = append(all, algFiles[k].file)
		}
		if k != sluice.SlidingLog && k < kindMsLog {
			singleScripts[kindCharge+int(k)] = assembleSingle(name+"_all", kindCharge+int(k))
		}
	}
	multiScript = assemble("multi", 1, all, "multi")
	returnScript = assemble("return", 1, all, "return")
	batchScript = assemble("batch", 1, all, "batch")
	resetScript = newScript("reset", luaFile("reset"))
}
