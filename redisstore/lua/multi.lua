-- multi.lua: AllowMulti, all or nothing. ARGV = [now µs or ''], TTL slack
-- ms, then 8 values per key KEYS[i]: kind, n, rate, period, cap, R, P,
-- extra. Requests on the same key are decided as if made one after the
-- other. Returns {all allowed, time, then allowed, remaining, retry, reset
-- per request}; when any is denied nothing is written, and the requests
-- that did not block report a peek of their state as it is (allowed 0,
-- retry 0): not counting the earlier requests of the call, which are not
-- counted either.
local now = now_us(ARGV[1])
local slack = tonumber(ARGV[2])
local out, reqs, cache, has = {1, now}, {}, {}, {}
for i = 1, #KEYS do
  local b = 2 + (i - 1) * 8
  local key = KEYS[i]
  local A = ALG[tonumber(ARGV[b + 1])]
  local n = tonumber(ARGV[b + 2])
  local p = {rate = tonumber(ARGV[b + 3]), period = tonumber(ARGV[b + 4]), cap = tonumber(ARGV[b + 5]),
    R = tonumber(ARGV[b + 6]), P = tonumber(ARGV[b + 7]), x = ARGV[b + 8]}
  local st0 = cache[key]
  local st, ok, rem, retry, reset = A.decide(key, now, n, p, st0)
  cache[key] = st
  if n > 0 then has[key] = true end
  reqs[i] = {A, key, n, p, st0}
  if ok == 0 then out[1] = 0 end
  local o = 2 + (i - 1) * 4
  out[o + 1], out[o + 2], out[o + 3], out[o + 4] = ok, rem, retry, reset
end
if out[1] == 0 then
  for i = 1, #KEYS do
    local o = 2 + (i - 1) * 4
    if out[o + 1] == 1 then
      local r = reqs[i]
      local _, _, rem, _, reset = r[1].decide(r[2], now, 0, r[4], nil)
      out[o + 1], out[o + 2], out[o + 4] = 0, rem, reset
    end
  end
  return out
end
for i = 1, #KEYS do
  local r = reqs[i]
  if has[r[2]] then
    has[r[2]] = nil
    r[1].commit(r[2], cache[r[2]], r[4], slack)
  end
end
return out
