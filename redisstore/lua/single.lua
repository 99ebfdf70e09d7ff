-- single.lua: one request. KEYS[1] = the state's key; ARGV = n, rate,
-- period, cap, R, P, extra, [now µs, test only], [TTL slack ms, test only].
-- Returns {allowed, remaining, retry µs, reset µs, time used µs}.
local _, A = next(ALG)
local n = tonumber(ARGV[1])
local p = {rate = tonumber(ARGV[2]), period = tonumber(ARGV[3]), cap = tonumber(ARGV[4]),
  R = tonumber(ARGV[5]), P = tonumber(ARGV[6]), x = ARGV[7]}
local st, ok, rem, retry, reset, used = A.decide(KEYS[1], now_us(ARGV[8]), n, p, nil)
if ok == 1 and n > 0 then A.commit(KEYS[1], st, p, tonumber(ARGV[9] or '0')) end
return {ok, rem, retry, reset, used}
