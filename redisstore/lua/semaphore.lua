-- semaphore.lua: the driver of the Semaphore's Acquire, Release and Extend
-- (semaphore.go). KEYS[1] = the key's holders, a ZSET of holder ids scored
-- by the end of their lease (µs, on Redis's clock). ARGV: the test clock's
-- time and slack (prologue.lua), then the operation ('a' acquire, 'r'
-- release, 'e' extend), the holder, Max and the lease (µs).
--
-- Every call first trims the expired holders (score <= now): O(expired),
-- and at most Max are ever stored, so a call's work is bounded by Max.
-- A holder that is present is renewed to now + lease (and so holds one
-- permit, not two); one that is not is added only while fewer than Max
-- are held. The key's TTL follows the latest lease, so that a key whose
-- holders all expired vanishes.
--
-- Returns {acquired (0/1), held, now, expires (µs, 0 when not acquired),
-- retry after (µs, on a denial: until the earliest lease ends)}.
local key, op, holder = KEYS[1], ARGV[3], ARGV[4]
redis.call('ZREMRANGEBYSCORE', key, '-inf', F('%d', now))

-- ttl sets the key's TTL to the latest lease held.
local function ttl()
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIRE', key, px(tonumber(last[2]) - now))
  end
end

if op == 'r' then
  if redis.call('ZREM', key, holder) == 1 then ttl() end
  return {0, redis.call('ZCARD', key), now, 0, 0}
end

local max, lease = tonumber(ARGV[5]), tonumber(ARGV[6])
local held = redis.call('ZCARD', key)
local present = redis.call('ZSCORE', key, holder)
if present or (op == 'a' and held < max) then
  local exp = now + lease
  redis.call('ZADD', key, F('%d', exp), holder)
  if not present then held = held + 1 end
  ttl()
  return {1, held, now, exp, 0}
end

local retry = 0
if held >= max then
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  retry = tonumber(first[2]) - now
end
return {0, held, now, 0, retry}
