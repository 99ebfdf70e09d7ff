-- ms_log.lua: one sliding-log decision in the millisecond layout
-- (WithMillisecondLayout), the layout of a widely used Python/Redis
-- sliding-log script, so that a fleet still running such workers shares one
-- quota with sluice: key rl:<key>, scores in ms, members "<ms>-<8 hex>", the
-- count is the entries scored above now_ms - window (what the Python
-- script's ZREMRANGEBYSCORE 0 now-window leaves and its ZCARD counts), and
-- an admission trims (at most n + 2 entries), adds and sets PEXPIRE window,
-- as the Python script does. Time is Redis's; it is not clamped, as the
-- Python script's is not. A denial or a peek writes nothing.
-- KEYS[1] = rl:<key>; ARGV = n, rate, window ms, random 32-bit integer,
-- [now µs, test only], [TTL slack ms, test only]. Returns {allowed,
-- remaining, retry µs, reset µs, time used µs}.
-- Integers go to redis.call through F('%d', x): a number would be written
-- by Redis with %.17g, exact below 2^53 but several times slower. F is
-- string.format, or, in a batch, a function that formats each integer once
-- for all the batch's decisions (they share now, and often their values).
local F = ... or string.format
local key = KEYS[1]
local n, rate, W, rnd = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now
if ARGV[5] then
  now = tonumber(ARGV[5])
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local ms = math.floor(now / 1000)
local lo = '(' .. F('%d', ms - W)
local count = redis.call('ZCOUNT', key, lo, '+inf')
local newest = -1
if count > 0 then
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  newest = tonumber(top[2])
end
if n > 0 and count + n > rate then
  local e = redis.call('ZRANGEBYSCORE', key, lo, '+inf', 'WITHSCORES', 'LIMIT', count + n - rate - 1, 1)
  return {0, math.max(rate - count, 0), (tonumber(e[2]) + W) * 1000 - now, (newest + W) * 1000 - now, now}
end
if n == 0 then
  local reset = 0
  if count > 0 then reset = (newest + W) * 1000 - now end
  return {1, math.max(rate - count, 0), 0, reset, now}
end
-- At most n + 2 of the oldest expired entries go (the Python script trims
-- them all, and counts after its own trim; sluice counts above now - window
-- and needs no trim to decide): the work follows the cost admitted, and an
-- admission removes more expired entries than it adds.
local old = redis.call('ZCOUNT', key, '-inf', F('%d', ms - W))
if old > 0 then redis.call('ZREMRANGEBYRANK', key, '0', F('%d', math.min(old, n + 2) - 1)) end
local t = F('%d', ms)
local args = {}
local i = 0
while i < n do
  local j = math.min(i + 499, n - 1)
  for k = i, j do
    args[#args + 1] = t
    args[#args + 1] = string.format('%d-%08x', ms, (rnd + k) % 4294967296)
  end
  redis.call('ZADD', key, unpack(args))
  args = {}
  i = j + 1
end
redis.call('PEXPIRE', key, W + (tonumber(ARGV[6]) or 0))
return {1, math.max(rate - count - n, 0), 0, (math.max(newest, ms) + W) * 1000 - now, now}
