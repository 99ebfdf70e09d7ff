-- sliding_log.lua: one sliding-log decision, internal/algo.SlidingLogStep,
-- on a ZSET: one entry per admitted event, scored by its time in µs, its
-- member a per-key sequence number (a small integer, 1 to 5 bytes in a
-- listpack). The last sequence number used is kept in the same ZSET as
-- member '#' scored -seq: negative, so it is never counted, expired or the
-- newest. Expired entries are removed when an admission crosses a multiple
-- of 8 in the sequence; a denial or a peek writes nothing.
-- KEYS[1] = state; ARGV = n, rate, period µs, [now µs, test only], [TTL
-- slack ms, test only]. Returns {allowed, remaining, retry µs, reset µs,
-- time used µs}.
-- Integers go to redis.call through F('%d', x): a number would be written
-- by Redis with %.17g, exact below 2^53 but several times slower. F is
-- string.format, or, in a batch, a function that formats each integer once
-- for all the batch's decisions (they share now, and often their values).
local F = ... or string.format
local key = KEYS[1]
local n, rate, per = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now
if ARGV[4] then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
-- The newest entry (ZRANGE WITHSCORES, whose score Redis 7.0 formats
-- slowly) is read only when a decision needs it: a denial or a peek (the
-- reset), or an entry after now (the clock ran back, and internal/algo
-- then decides at the newest entry's time). Counts tell the rest.
local cut = now - per
local lo = '(' .. F('%d', math.max(cut, -1))
local count = redis.call('ZCOUNT', key, lo, '+inf')
local newest
if count > 0 then
  if n == 0 or count + n > rate or redis.call('ZCOUNT', key, '(' .. F('%d', now), '+inf') > 0 then
    newest = tonumber(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2])
    if now < newest then
      now = newest
      cut = now - per
      lo = '(' .. F('%d', math.max(cut, -1))
      count = redis.call('ZCOUNT', key, lo, '+inf')
    end
  end
end
if n > 0 and count + n > rate then
  -- (count > 0 here, as n <= rate: newest is known.)
  local e = redis.call('ZRANGEBYSCORE', key, lo, '+inf', 'WITHSCORES', 'LIMIT', F('%d', count + n - rate - 1), '1')
  return {0, math.max(rate - count, 0), tonumber(e[2]) + per - now, newest + per - now, now}
end
if n == 0 then
  local reset = 0
  if count > 0 then reset = newest + per - now end
  return {1, math.max(rate - count, 0), 0, reset, now}
end
local seq = 0
local s = redis.call('ZSCORE', key, '#')
if s then seq = -tonumber(s) end
-- Expired entries are trimmed at every 8th sequence number, not at every
-- admission (the trim was a sixth of an admission's cost): every read above
-- counts from the cut, and the newest entry, at or after the time of the
-- last admission, keeps the cut from moving back over what was not trimmed.
-- A trim removes at most n + 16 of the oldest expired entries (and '#',
-- written again below), so that its work follows the cost admitted, not
-- the log's length: at least 9 more than were admitted since the last
-- trim, which keeps a key within Rate + 24 entries.
if cut >= 0 and math.floor((seq + n) / 8) > math.floor(seq / 8) then
  local old = redis.call('ZCOUNT', key, '-inf', F('%d', cut))
  if old > 0 then redis.call('ZREMRANGEBYRANK', key, '0', F('%d', math.min(old, n + 17) - 1)) end
end
local t = F('%d', now)
local args = {F('%d', -(seq + n)), '#'}
local i = 1
while i <= n do
  local j = math.min(i + 499, n)
  for k = i, j do
    args[#args + 1] = t
    args[#args + 1] = F('%d', seq + k)
  end
  redis.call('ZADD', key, unpack(args))
  args = {}
  i = j + 1
end
redis.call('PEXPIRE', key, F('%d', math.floor((per + 999) / 1000) + (tonumber(ARGV[5]) or 0)))
return {1, math.max(rate - count - n, 0), 0, per, now}
