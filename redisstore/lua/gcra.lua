-- gcra.lua: one GCRA decision, internal/algo.GCRAStep. Flat on purpose,
-- since this is the hot path: its only functions are read_state and
-- rest_gcra (built in before it), its only table the reply.
-- KEYS[1] = state; ARGV = n, cap*P, P, R, [now µs, test only], [TTL slack
-- ms, test only]. The value is the theoretical arrival time TAT + frac/R:
-- one integer (µs) when frac is 0, "tat:frac" otherwise.
-- Returns {allowed, remaining, retry µs, reset µs, time used µs}.
-- Integers go to redis.call through F('%d', x): a number would be written
-- by Redis with %.17g, exact below 2^53 but several times slower. F is
-- string.format, or, in a batch, a function that formats each integer once
-- for all the batch's decisions (they share now, and often their values).
-- V, in a batch only, is the value that batch.lua's SET NX GET found: the
-- key exists, and is decided as after a GET.
local F, V = ...
F = F or string.format
local floor = math.floor
local key = KEYS[1]
local n, full, P, R = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now
if ARGV[5] then
  now = tonumber(ARGV[5])
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local d = 0
-- An absent key (at rest) admits n with one SET NX GET (read_state.lua).
local s, px, rem, reset
if not V then s, px, rem, reset = rest_gcra(n, full, P, R, now, tonumber(ARGV[6]) or 0, F) end
local v = read_state(key, V, s, px)
if s and not v then return {1, rem, 0, reset, now} end
if v then
  local at, frac
  local i = string.find(v, ':', 1, true)
  if i then
    at, frac = tonumber(string.sub(v, 1, i - 1)), tonumber(string.sub(v, i + 1))
  else
    at, frac = tonumber(v), 0
  end
  if not (at == 0 and frac == 0) then -- the zero TAT is an untouched key
    -- Read under this limit: {-1, R} stands for the epoch; a frac written
    -- under another Rate is cut to R-1, within the same µs.
    if at == -1 and frac == R then
      at, frac = 0, 0
    elseif frac >= R then
      frac = R - 1
    end
    if at > now or (at == now and frac > 0) then
      if at - now > floor(full / R) + 1 then
        -- More than a full bucket ahead (Burst lowered, clock behind):
        -- nothing is admitted, and the times count exactly from the TAT.
        local ahead = at - now
        local reset = ahead + floor((frac + R - 1) / R)
        if n > 0 then return {0, 0, ahead - floor(-(frac + n * P - full) / R), reset, now} end
        return {1, 0, 0, reset, now}
      end
      d = (at - now) * R + frac
    end
  end
end
local d2 = d + n * P
if n > 0 and d2 > full then
  return {0, floor(math.max(full - d, 0) / P), floor((d2 - full + R - 1) / R), floor((d + R - 1) / R), now}
end
local reset = floor((d2 + R - 1) / R)
if n > 0 then
  local q = floor(d2 / R)
  local at, frac = now + q, d2 - q * R
  if at == 0 and frac == 0 then at, frac = -1, R end
  local s
  if frac == 0 then s = F('%d', at) else s = string.format('%d:%d', at, frac) end
  redis.call('SET', key, s, 'PX', F('%d', floor((reset + 999) / 1000) + (tonumber(ARGV[6]) or 0)))
end
return {1, floor(math.max(full - d2, 0) / P), 0, reset, now}
