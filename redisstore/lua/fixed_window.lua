-- fixed_window.lua: one fixed-window decision, internal/algo.FixedWindowStep.
-- KEYS[1] = state; ARGV = n, rate, period µs, [now µs, test only], [TTL
-- slack ms, test only]. The value is one integer, start + count, when count
-- < period (start is a multiple of period, so it decodes exactly), and
-- "start:count" otherwise. Returns {allowed, remaining, retry µs, reset µs,
-- time used µs}.
-- Integers go to redis.call through F('%d', x): a number would be written
-- by Redis with %.17g, exact below 2^53 but several times slower. F is
-- string.format, or, in a batch, a function that formats each integer once
-- for all the batch's decisions (they share now, and often their values).
-- V, in a batch only, is the value that batch.lua's SET NX GET found: the
-- key exists, and is decided as after a GET.
local F, V = ...
F = F or string.format
local key = KEYS[1]
local n, rate, per = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now
if ARGV[4] then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local start, count, packed = 0, 0, false
-- An absent key (at rest) admits n with one SET NX GET (read_state.lua).
local s, px, rem, reset
if not V then s, px, rem, reset = rest_fixed_window(n, rate, per, now, tonumber(ARGV[5]) or 0, F) end
local v = read_state(key, V, s, px)
if s and not v then return {1, rem, 0, reset, now} end
if v then
  local i = string.find(v, ':', 1, true)
  if i then
    start, count = tonumber(string.sub(v, 1, i - 1)), tonumber(string.sub(v, i + 1))
  else
    packed = true
    local x = tonumber(v)
    count = x % per
    start = x - count
  end
end
if count > 0 and now < start then now = start end
local ws = now - now % per
local c = 0
if count > 0 and start == ws then c = count end
local e = ws + per - now
if n > 0 and c + n > rate then return {0, math.max(rate - c, 0), e, e, now} end
if n == 0 then
  local reset = 0
  if c > 0 then reset = e end
  return {1, math.max(rate - c, 0), 0, reset, now}
end
local same = packed and c > 0
c = c + n
if same and c < per then
  -- The window's key already expires at the window's end: count on.
  redis.call('INCRBY', key, F('%d', n))
else
  local s
  if c < per then s = F('%d', ws + c) else s = string.format('%d:%d', ws, c) end
  redis.call('SET', key, s, 'PX', F('%d', math.floor((e + 999) / 1000) + (tonumber(ARGV[5]) or 0)))
end
return {1, rate - c, 0, e, now}
