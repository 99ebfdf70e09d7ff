-- token_bucket.lua: one token-bucket decision, internal/algo.TokenBucketStep.
-- KEYS[1] = state; ARGV = n, cap*P, P, R, [now µs, test only], [TTL slack
-- ms, test only]. The value is "deficit:last", the deficit in scaled units
-- (one token is P, R refill per µs). Returns {allowed, remaining, retry µs,
-- reset µs, time used µs}.
local floor = math.floor
-- Integers go to redis.call through F('%d', x): a number would be written
-- by Redis with %.17g, exact below 2^53 but several times slower. F is
-- string.format, or, in a batch, a function that formats each integer once
-- for all the batch's decisions (they share now, and often their values).
local F = ... or string.format
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
local v
if n > 0 and n * P <= full then
  -- An absent key (at rest) admits n: SET NX GET writes the state that
  -- admission leaves, in one call; on a key that exists it writes nothing
  -- and returns the value, decided below as after a GET.
  local d2 = n * P
  local reset = floor((d2 + R - 1) / R)
  v = redis.call('SET', key, string.format('%d:%d', d2, now), 'NX', 'GET', 'PX', F('%d', floor((reset + 999) / 1000) + (tonumber(ARGV[6]) or 0)))
  if not v then return {1, floor(math.max(full - d2, 0) / P), 0, reset, now} end
else
  v = redis.call('GET', key)
end
if v then
  local i = string.find(v, ':', 1, true)
  d = tonumber(string.sub(v, 1, i - 1))
  local last = tonumber(string.sub(v, i + 1))
  if d > 0 then
    if now < last then now = last end
    local el = now - last
    if el >= floor((d + R - 1) / R) then d = 0 else d = d - el * R end
  end
end
local d2 = d + n * P
if n > 0 and d2 > full then
  return {0, floor(math.max(full - d, 0) / P), floor((d2 - full + R - 1) / R), floor((d + R - 1) / R), now}
end
local reset = floor((d2 + R - 1) / R)
if n > 0 then
  redis.call('SET', key, string.format('%d:%d', d2, now), 'PX', F('%d', floor((reset + 999) / 1000) + (tonumber(ARGV[6]) or 0)))
end
return {1, floor(math.max(full - d2, 0) / P), 0, reset, now}
