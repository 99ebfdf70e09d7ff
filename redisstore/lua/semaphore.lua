-- semaphore.lua: the driver of the Semaphore's Acquire, Release and Extend
-- (semaphore.go). KEYS[1] = the key's holders, a ZSET of holder ids scored
-- by the end of their lease (µs, on Redis's clock). ARGV: the test clock's
-- time and slack (prologue.lua), then the operation ('a' acquire, 'r'
-- release, 'e' extend), the holder, Max and the lease (µs).
--
-- A holder whose lease ended (score <= now) holds nothing: the holders are
-- counted above now (ZCOUNT, whose work grows by a logarithm with the
-- set), and every call removes at most 16 of the expired, the oldest, so
-- that a call's work stays bounded however many leases ended together. A
-- call that adds a holder removes an expired one first when there is one,
-- so the set never holds more members than the largest Max the key was
-- acquired under. A holder that is present is renewed to now + lease (and
-- so holds one permit, not two); one that is not, or whose lease ended, is
-- added only while fewer than Max are held. The key's TTL follows the
-- latest lease, so that a key whose holders all expired vanishes.
--
-- Returns {acquired (0/1), held, now, expires (µs, 0 when not acquired),
-- retry after (µs, on a denial: until the earliest lease ends)}.
local key, op, holder = KEYS[1], ARGV[3], ARGV[4]
local t = F('%d', now)
local expired = redis.call('ZCOUNT', key, '-inf', t)
if expired > 0 then redis.call('ZREMRANGEBYRANK', key, '0', F('%d', math.min(expired, 16) - 1)) end

-- ttl sets the key's TTL to the latest lease held.
local function ttl()
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIRE', key, px(tonumber(last[2]) - now))
  end
end

if op == 'r' then
  if redis.call('ZREM', key, holder) == 1 then ttl() end
  return {0, redis.call('ZCOUNT', key, '(' .. t, '+inf'), now, 0, 0}
end

local max, lease = tonumber(ARGV[5]), tonumber(ARGV[6])
local held = redis.call('ZCOUNT', key, '(' .. t, '+inf')
local present = tonumber(redis.call('ZSCORE', key, holder))
present = present and present > now
if present or (op == 'a' and held < max) then
  local exp = now + lease
  redis.call('ZADD', key, F('%d', exp), holder)
  if not present then held = held + 1 end
  ttl()
  return {1, held, now, exp, 0}
end

local retry = 0
if held >= max then
  local first = redis.call('ZRANGEBYSCORE', key, '(' .. t, '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
  retry = tonumber(first[2]) - now
end
return {0, held, now, 0, retry}
