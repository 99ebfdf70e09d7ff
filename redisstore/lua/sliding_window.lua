-- sliding_window.lua: one sliding-window-counter decision,
-- internal/algo.SlidingWindowStep. KEYS[1] = state; ARGV = n, rate, period
-- µs, [now µs, test only], [TTL slack ms, test only]. The value is
-- "start:prev:cur". Returns {allowed, remaining, retry µs, reset µs, time
-- used µs}.
local floor = math.floor
-- Integers go to redis.call through F('%d', x): a number would be written
-- by Redis with %.17g, exact below 2^53 but several times slower. F is
-- string.format, or, in a batch, a function that formats each integer once
-- for all the batch's decisions (they share now, and often their values).
-- V, in a batch only, is the value that batch.lua's SET NX GET found: the
-- key exists, and is decided as after a GET.
local F, V = ...
F = F or string.format
local key = KEYS[1]
local n, rate, P = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now
if ARGV[4] then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local start, sprev, scur = 0, 0, 0
-- An absent key (at rest) admits n with one SET NX GET (read_state.lua).
local s, px, rem, reset
if not V then s, px, rem, reset = rest_sliding_window(n, rate, P, now, tonumber(ARGV[5]) or 0, F) end
local v = read_state(key, V, s, px)
if s and not v then return {1, rem, 0, reset, now} end
if v then
  local i = string.find(v, ':', 1, true)
  local j = string.find(v, ':', i + 1, true)
  start, sprev, scur = tonumber(string.sub(v, 1, i - 1)), tonumber(string.sub(v, i + 1, j - 1)), tonumber(string.sub(v, j + 1))
end
if (sprev > 0 or scur > 0) and now < start then now = start end
local ws = now - now % P
local prev, cur = 0, 0
if start == ws then
  prev, cur = sprev, scur
elseif start == ws - P then
  prev = scur
end
local e = now - ws
local count = floor(prev * (P - e) / P) + cur
if n > 0 and count + n > rate then
  -- The closed form of the earliest admitting time: floor(x*(P-e)/P) <= a
  -- exactly when e >= P - floor(((a+1)*P-1)/x).
  local retry
  local a = rate - n - cur
  if a >= 0 and prev > 0 then
    local e2 = math.max(P - floor(((a + 1) * P - 1) / prev), 0)
    if e2 < P then retry = ws + e2 - now end
  end
  if not retry then
    local e2 = 0
    if cur > 0 then e2 = math.min(math.max(P - floor(((rate - n + 1) * P - 1) / cur), 0), P) end
    retry = ws + P + e2 - now
  end
  local reset = 0
  if cur > 0 then reset = ws + 2 * P - now elseif prev > 0 then reset = ws + P - now end
  return {0, math.max(rate - count, 0), retry, reset, now}
end
if n == 0 then
  local reset = 0
  if cur > 0 then reset = ws + 2 * P - now elseif prev > 0 then reset = ws + P - now end
  return {1, math.max(rate - count, 0), 0, reset, now}
end
local same = start == ws and scur > 0
cur = cur + n
local reset = ws + 2 * P - now
if same then
  -- The key already expires when this window's count stops mattering.
  redis.call('SET', key, string.format('%d:%d:%d', ws, prev, cur), 'KEEPTTL')
else
  redis.call('SET', key, string.format('%d:%d:%d', ws, prev, cur), 'PX', F('%d', floor((reset + 999) / 1000) + (tonumber(ARGV[5]) or 0)))
end
return {1, rate - count - n, 0, reset, now}
