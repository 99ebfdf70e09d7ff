package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Calibration is a script of sliding_log.lua's kind of work: 2000 entries
// of a ZSET removed and 2000 written, in ZADDs of 500. It takes about twice
// the Redis time of sluice's heaviest single decision (a sliding log of
// the largest Rate, 500, taking its Rate onto a full expired log), a
// little over 1 ms on an idle machine. Tests that bound a script's Redis
// time compare, on a machine that stretches every script (other work on
// its cores and caches, a slower CPU), with the calibration measured in
// the same run (Calibrate): a script twice as heavy as the heaviest
// decision fails on any machine, and a busy machine fails none.
const Calibration = `
redis.call('ZREMRANGEBYRANK', KEYS[1], '0', '1999')
for c = 0, 3 do
  local args = {}
  for k = 1, 500 do
    args[#args + 1] = string.format('%d', 1800000000000000 + c * 500 + k)
    args[#args + 1] = string.format('%d', c * 500 + k)
  end
  redis.call('ZADD', KEYS[1], unpack(args))
end
return 1`

// Calibrate runs Calibration three times on key (filled with 2000 entries
// before each run) and returns its fastest run's Redis time.
func (i *Instance) Calibrate(key string) (time.Duration, error) {
	fill := []string{"ZADD", key}
	for k := range 2000 {
		fill = append(fill, strconv.Itoa(k), "old-"+strconv.Itoa(k))
	}
	fastest := time.Duration(-1)
	for range 3 {
		if _, err := i.Do(fill...); err != nil {
			return 0, fmt.Errorf("calibration: %w", err)
		}
		d, err := i.CommandTime("EVAL", Calibration, "1", key)
		if err != nil {
			return 0, fmt.Errorf("calibration: %w", err)
		}
		if fastest < 0 || d < fastest {
			fastest = d
		}
	}
	i.Do("DEL", key)
	return fastest, nil
}

// CommandTime runs one command on a fresh connection and returns the Redis
// time it took, as INFO commandstats counts it (the usec of its command
// name before and after): the server's own measure, without the round
// trip. Other clients' calls of the same command in the meantime would
// count too. A Redis error reply is returned with the time.
func (i *Instance) CommandTime(args ...string) (time.Duration, error) {
	if len(args) == 0 {
		return 0, fmt.Errorf("CommandTime: no command")
	}
	name := strings.ToLower(args[0])
	before, err := i.commandUsec(name)
	if err != nil {
		return 0, err
	}
	_, cmdErr := i.Do(args...)
	after, err := i.commandUsec(name)
	if err != nil {
		return 0, err
	}
	return time.Duration(after-before) * time.Microsecond, cmdErr
}

// commandUsec is the usec of cmdstat_<name> in INFO commandstats (0 when
// the command has not run yet).
func (i *Instance) commandUsec(name string) (int64, error) {
	info, err := i.Do("INFO", "commandstats")
	if err != nil {
		return 0, err
	}
	stat := infoField(info, "cmdstat_"+name)
	for _, f := range strings.Split(stat, ",") {
		if v, ok := strings.CutPrefix(f, "usec="); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, nil
}
