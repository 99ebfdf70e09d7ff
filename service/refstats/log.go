package refstats

import (
	"encoding/json"
	"io"
	"strconv"
	"sync"
	"time"
)

// LogSink writes the statistics as JSON lines, as the reference does when
// no other sink is on (USE_STATSD=false): one line per counter, gauge and
// timing at each flush, and one for the flush itself, in lyft/gostats's
// format:
//
//	{"level":"debug","ts":1764662400.123456,"logger":"gostats.loggingsink","msg":"flushing counter","json":{"name":"...","type":"counter","value":"5.000000"}}
type LogSink struct {
	mu  sync.Mutex
	w   io.Writer
	now func() time.Time
}

var _ Sink = (*LogSink)(nil)

// NewLogSink returns a LogSink writing to w.
func NewLogSink(w io.Writer) *LogSink { return &LogSink{w: w, now: time.Now} }

// sixDecimals is a float written with six decimals, as the reference
// writes its timestamps.
type sixDecimals float64

func (f sixDecimals) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, float64(f), 'f', 6, 64), nil
}

type logLine struct {
	Level  string            `json:"level"`
	TS     sixDecimals       `json:"ts"`
	Logger string            `json:"logger"`
	Msg    string            `json:"msg"`
	JSON   map[string]string `json:"json"`
}

func (s *LogSink) log(name, typ string, v float64) {
	kv := map[string]string{"type": typ, "value": strconv.FormatFloat(v, 'f', 6, 64)}
	if name != "" {
		kv["name"] = name
	}
	line := logLine{Level: "debug", TS: sixDecimals(float64(s.now().UnixNano()) / 1e9), Logger: "gostats.loggingsink", Msg: "flushing " + typ, JSON: kv}
	b, err := json.Marshal(line)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.w.Write(append(b, '\n'))
}

// Counter implements Sink.
func (s *LogSink) Counter(name string, v uint64) { s.log(name, "counter", float64(v)) }

// Gauge implements Sink.
func (s *LogSink) Gauge(name string, v uint64) { s.log(name, "gauge", float64(v)) }

// Timer implements Sink.
func (s *LogSink) Timer(name string, ms float64) { s.log(name, "timer", ms) }

// Flush implements Sink.
func (s *LogSink) Flush() { s.log("", "all stats", 0) }
