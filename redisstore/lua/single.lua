-- single.lua: the driver of one counter's decision (AllowN's script when
-- it is not batched, for the fixed window, sliding window, token bucket and
-- GCRA), after the prologue and its algorithm's file; STEP is the
-- algorithm's step. KEYS[1] = state; ARGV = n, the limit's two or three
-- values (A, B, C), [now µs, test only], [TTL slack ms, test only]. Returns
-- {allowed, remaining, retry µs, reset µs, time used µs}.
--
-- A counter's step(v, now, n, A, B, C) decides on the key's value v (false
-- when absent) and writes nothing: it returns allowed, remaining, retry,
-- reset, the time used and, when it admits n > 0, the value to write and
-- whether the key keeps its TTL (else the TTL is the reset; see write). An absent key
-- (at rest) admits n > 0 with one SET NX GET of the value its step gives,
-- which on a key that exists writes nothing and returns the value; without
-- that admission (a peek), GET reads it.
--
-- scripts.go writes the step, and every function it calls, into this
-- script as inline code: the hot path makes no closures per call.
local key, n, A, B = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local C
if TA > 4 then
  C = tonumber(ARGV[4])
end
local ok, rem, retry, reset, used, val = STEP(false, now, n, A, B, C)
local v
if val then
  local p = px(reset)
  v = redis.call('SET', key, val, 'NX', 'GET', 'PX', p)
else
  v = redis.call('GET', key)
end
if v then
  local keep
  ok, rem, retry, reset, used, val, keep = STEP(v, now, n, A, B, C)
  write(key, val, reset, keep)
end
return {ok, rem, retry, reset, used}
