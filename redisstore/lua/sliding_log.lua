-- sliding_log.lua: the sliding log, internal/algo.SlidingLogStep
-- (sl_decide, then sl_write for an admission) and SlidingLogReturn
-- (sl_return), on a ZSET: one entry per admitted event, scored by its time
-- in µs, its member a per-key sequence number (a small integer, 1 to 5
-- bytes in a listpack). The last sequence number used is kept in the same
-- ZSET as member '#' scored -seq: negative, so it is never counted, expired
-- or the newest. A denial or a peek writes nothing.

-- sl_decide decides n at now under rate per period µs, after pend events
-- that AllowMulti decided at the same time and has not written yet, and
-- returns allowed, remaining, retry µs, reset µs and the time used; it
-- never writes. The newest entry (ZRANGE WITHSCORES, whose score Redis 7.0
-- formats slowly) is read only when the decision needs it: a denial or a
-- peek (the reset), or an entry after now (the clock ran back, and
-- internal/algo then decides at the newest entry's time). Counts tell the
-- rest.
local function sl_decide(key, now, n, rate, per, _, pend)
  local cut = now - per
  local lo = '(' .. F('%d', math.max(cut, -1))
  local count = redis.call('ZCOUNT', key, lo, '+inf')
  local newest
  if count > 0 then
    if n == 0 or count + pend + n > rate or redis.call('ZCOUNT', key, '(' .. F('%d', now), '+inf') > 0 then
      newest = tonumber(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2])
      if now < newest then
        now = newest
        cut = now - per
        lo = '(' .. F('%d', math.max(cut, -1))
        count = redis.call('ZCOUNT', key, lo, '+inf')
      end
    end
  end
  local total = count + pend
  if n > 0 and total + n > rate then
    -- The entry whose expiry admits n: a stored one, or a pending one
    -- (stamped now).
    local retry = per
    if total + n - rate <= count then
      local e = redis.call('ZRANGEBYSCORE', key, lo, '+inf', 'WITHSCORES', 'LIMIT', F('%d', total + n - rate - 1), '1')
      retry = tonumber(e[2]) + per - now
    end
    local reset = per
    if pend == 0 then reset = newest + per - now end -- (count > 0 here, as n <= rate)
    return 0, math.max(rate - total, 0), retry, reset, now
  end
  if n == 0 then
    local reset = 0
    if pend > 0 then
      reset = per
    elseif count > 0 then
      reset = newest + per - now
    end
    return 1, math.max(rate - total, 0), 0, reset, now
  end
  return 1, math.max(rate - total - n, 0), 0, per, now
end

-- sl_write writes the admission of n at now (the time sl_decide used).
-- Expired entries are trimmed at every 8th sequence number, not at every
-- admission (the trim was a sixth of an admission's cost): every read
-- counts from the cut, and the newest entry, at or after the time of the
-- last admission, keeps the cut from moving back over what was not trimmed.
-- A trim removes at most n + 16 of the oldest expired entries (and '#',
-- written again below), so that its work follows the cost admitted, not
-- the log's length: at least 9 more than were admitted since the last
-- trim, which keeps a key within Rate + 24 entries. AllowMulti's commit
-- (every true) trims at every write instead, at most n + 3: it writes up to
-- 16 logs in one call, whose work this keeps within the bound of one, and
-- each of its trims still removes more than it adds.
local function sl_write(key, now, n, _, per, _, every)
  local seq = 0
  local s = redis.call('ZSCORE', key, '#')
  if s then seq = -tonumber(s) end
  local cut = now - per
  if cut >= 0 and (every or floor((seq + n) / 8) > floor(seq / 8)) then
    local old = redis.call('ZCOUNT', key, '-inf', F('%d', cut))
    local most = n + 17
    if every then most = n + 3 end
    if old > 0 then redis.call('ZREMRANGEBYRANK', key, '0', F('%d', math.min(old, most) - 1)) end
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
  local ttl = px(per)
  redis.call('PEXPIRE', key, ttl)
end

-- sl_return gives back up to n entries stamped at at. The entries at or
-- before at-P go too: internal/algo dropped them when it admitted the
-- entries stamped at, and the log may still hold them (it trims at every
-- 8th admission). Otherwise, with the newest entry returned, nothing would
-- keep a later decision on a clock that ran back from counting them again.
-- A false at (a refund whose admission time is unknown) gives back the n
-- newest entries.
local function sl_return(key, _, at, n, _, per)
  if not at then
    local ms = redis.call('ZREVRANGE', key, '0', F('%d', n))
    local out = {}
    for _, m in ipairs(ms) do
      if m ~= '#' and #out < n then out[#out + 1] = m end
    end
    if #out > 0 then redis.call('ZREM', key, unpack(out)) end
    return
  end
  local ms = redis.call('ZRANGEBYSCORE', key, F('%d', at), F('%d', at), 'LIMIT', 0, n)
  if #ms == 0 then return end
  redis.call('ZREM', key, unpack(ms))
  if at - per >= 0 then redis.call('ZREMRANGEBYSCORE', key, 0, F('%d', at - per)) end
end
