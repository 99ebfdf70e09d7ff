-- batch.lua: independent decisions of concurrent callers in one script run,
-- so that the cost of running a script (and of TIME) is shared: each is
-- exactly one AllowN, decided one after the other, admitted and written or
-- denied on its own. ARGV = TTL slack ms, then 9 values per key KEYS[i]:
-- kind, n, rate, period, cap, R, P, extra, [now µs, test only, or ''].
-- Returns 5 values per decision: allowed, remaining, retry µs, reset µs,
-- time used µs.
local slack = tonumber(ARGV[1])
local now, out = nil, {}
for i = 1, #KEYS do
  local b = 1 + (i - 1) * 9
  local key = KEYS[i]
  local A = ALG[tonumber(ARGV[b + 1])]
  local n = tonumber(ARGV[b + 2])
  local p = {rate = tonumber(ARGV[b + 3]), period = tonumber(ARGV[b + 4]), cap = tonumber(ARGV[b + 5]),
    R = tonumber(ARGV[b + 6]), P = tonumber(ARGV[b + 7]), x = ARGV[b + 8]}
  local t = ARGV[b + 9]
  if t ~= '' then
    t = tonumber(t)
  else
    if not now then now = now_us(nil) end
    t = now
  end
  local st, ok, rem, retry, reset, used = A.decide(key, t, n, p, nil)
  if ok == 1 and n > 0 then A.commit(key, st, p, slack) end
  local o = (i - 1) * 5
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = ok, rem, retry, reset, used
end
return out
