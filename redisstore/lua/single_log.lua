-- single_log.lua: the driver of one log's decision (AllowN's script when
-- it is not batched, for the sliding log in either layout), after the
-- prologue and its algorithm's file; DECIDE and WRITE are the algorithm's
-- decision and write. KEYS[1] = state; ARGV = n, the limit's two or three
-- values (A, B, C), [now µs, test only], [TTL slack ms, test only]. Returns
-- {allowed, remaining, retry µs, reset µs, time used µs}.
--
-- scripts.go writes DECIDE and WRITE, and every function they call, into
-- this script as inline code: the hot path makes no closures per call.
local key, n, A, B = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local C
if TA > 4 then
  C = tonumber(ARGV[4])
end
local ok, rem, retry, reset, used, last, same = DECIDE(key, now, n, A, B, C, 0)
if ok == 1 and n > 0 then
  WRITE(key, used, n, A, B, C, last, same)
end
return {ok, rem, retry, reset, used}
