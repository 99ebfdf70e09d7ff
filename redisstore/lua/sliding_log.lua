-- sliding_log.lua: the sliding log, internal/algo.SlidingLogStep
-- (sl_decide, then sl_write for an admission), SlidingLogReturn and
-- SlidingLogReturnNewest (sl_return), on a ZSET that holds internal/algo's
-- Log: one member per time of admission, scored by the time in µs and
-- named by the number of its first unit (units are numbered as they are
-- admitted; a decimal integer, 1 to 9 bytes in a listpack). A member holds
-- the units from its number up to the next member's, the newest up to the
-- last number used, kept in the same ZSET as member '#' scored -last:
-- negative, so never counted or the newest. Only the newest member may hold
-- no unit (a return emptied it): it keeps the time a clock that runs back
-- is clamped to. A denial or a peek writes nothing.

-- sl_unit returns the time of the live unit numbered u, where f is the
-- number of the first member after cut: the member with the largest number
-- at or below u. Each member holds a unit or more, so it lies within u - f
-- ranks of the first; found at once when the members between hold one unit
-- each, else by bisection over ranks ('#' has the lowest rank of all).
local function sl_unit(key, cut, f, u)
  local lo = redis.call('ZCOUNT', key, '-inf', F('%d', math.max(cut, -1)))
  local hi = math.min(lo + u - f, redis.call('ZCARD', key) - 1)
  local e = redis.call('ZRANGE', key, F('%d', hi), F('%d', hi), 'WITHSCORES')
  if tonumber(e[1]) > u then
    -- The number at rank lo is at most u, the one at hi above it.
    while hi - lo > 1 do
      local mid = floor((lo + hi) / 2)
      if tonumber(redis.call('ZRANGE', key, F('%d', mid), F('%d', mid))[1]) <= u then
        lo = mid
      else
        hi = mid
      end
    end
    e = redis.call('ZRANGE', key, F('%d', lo), F('%d', lo), 'WITHSCORES')
  end
  return tonumber(e[2])
end

-- sl_newest returns the time of the newest unit, numbered last: the newest
-- member's, or the one before when a return emptied the newest. The log
-- holds a live unit.
local function sl_newest(key, last)
  local e = redis.call('ZRANGE', key, '-2', '-1', 'WITHSCORES')
  if tonumber(e[#e - 1]) <= last then return tonumber(e[#e]) end
  return tonumber(e[2])
end

-- sl_decide decides n at now under rate per period µs, after pend events
-- that AllowMulti decided at the same time and has not written yet, and
-- returns allowed, remaining, retry µs, reset µs and the time used, and
-- for an admission what sl_write needs: the last unit's number and whether
-- the newest member is of the time used. It never writes. The newest
-- member (ZRANGE WITHSCORES, whose score Redis 7.0 formats slowly) is read
-- only when the decision needs it: a denial or a peek (the reset), or a
-- member at now or after (the clock ran back, and internal/algo then
-- decides at the newest member's time; or this admission joins it). The
-- units in the window are the last number less the first live member's.
local function sl_decide(key, now, n, rate, per, _, pend)
  local same = false
  if redis.call('ZCOUNT', key, F('%d', now), '+inf') > 0 then
    now = math.max(now, tonumber(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2]))
    same = true
  end
  local cut = now - per
  local last = tonumber(redis.call('ZSCORE', key, '#'))
  local count, f = 0, 0
  if last then
    last = -last
    local m = redis.call('ZRANGEBYSCORE', key, '(' .. F('%d', math.max(cut, -1)), '+inf', 'LIMIT', '0', '1')[1]
    if m then
      f = tonumber(m)
      count = last - f + 1
    end
  else
    last = 0
  end
  local total = count + pend
  if n > 0 and total + n > rate then
    -- The unit whose expiry admits n: a stored one, or a pending one
    -- (stamped now).
    local retry = per
    if total + n - rate <= count then
      retry = sl_unit(key, cut, f, f + total + n - rate - 1)
      retry = retry + per - now
    end
    local reset = per
    if pend == 0 then -- (count > 0 here, as n <= rate)
      reset = sl_newest(key, last)
      reset = reset + per - now
    end
    return 0, math.max(rate - total, 0), retry, reset, now
  end
  if n == 0 then
    local reset = 0
    if pend > 0 then
      reset = per
    elseif count > 0 then
      reset = sl_newest(key, last)
      reset = reset + per - now
    end
    return 1, math.max(rate - total, 0), 0, reset, now
  end
  return 1, math.max(rate - total - n, 0), 0, per, now, last, same
end

-- sl_write writes the admission of n units at now (the time sl_decide
-- used, with its last and same): into the newest member when it is of now
-- (or an empty one, which a ZADD of the same name moves to now), else as a
-- new member; so that the work of an admission does not grow with its
-- cost. Expired members are trimmed when the units' numbers pass a multiple
-- of 8 (at every 8th admission of one unit; the trim was a sixth of an
-- admission's cost), at most 17 of the oldest (with '#', written again
-- below): at least 9 more than were added since the last trim, which keeps
-- a log within Rate + 25 members, and the work of a call bounded whatever
-- the log's length. AllowMulti's commit (every true) trims at every write
-- instead, at most 3: it writes up to 16 logs in one call, whose work this
-- keeps within the bound of one, and each of its trims still removes more
-- than it adds. Every read counts from the cut, and the newest member
-- keeps the cut from moving back over what was not trimmed.
local function sl_write(key, now, n, _, per, _, last, same, every)
  local cut = now - per
  if cut >= 0 and (every or floor((last + n) / 8) > floor(last / 8)) then
    local old = redis.call('ZCOUNT', key, '-inf', F('%d', cut))
    local most = 17
    if every then most = 3 end
    if old > 0 then redis.call('ZREMRANGEBYRANK', key, '0', F('%d', math.min(old, most) - 1)) end
  end
  if same then
    redis.call('ZADD', key, F('%d', -(last + n)), '#')
  else
    redis.call('ZADD', key, F('%d', -(last + n)), '#', F('%d', now), F('%d', last + 1))
  end
  local ttl = px(per)
  redis.call('PEXPIRE', key, ttl)
end

-- sl_return gives back up to n units stamped at at (false: the newest
-- units, a refund whose admission time is unknown) that still count at
-- now, among the newest LOG_RETURN_DEPTH members: the members after them
-- are renumbered (written again under their new names), and a member left
-- without a unit goes, but the newest, which keeps the time.
local function sl_return(key, now, at, n, _, per)
  local last = tonumber(redis.call('ZSCORE', key, '#'))
  if not last then return end
  last = -last
  local e = redis.call('ZRANGE', key, F('%d', -LOG_RETURN_DEPTH), '-1', 'WITHSCORES')
  local num, t = {}, {}
  for j = 1, #e, 2 do
    if e[j] ~= '#' then num[#num + 1], t[#t + 1] = tonumber(e[j]), tonumber(e[j + 1]) end
  end
  local m = #num
  local cut = math.max(now, t[m]) - per
  local i, k -- the member (index in num) whose units go, and how many
  if at then
    if at <= cut then return end
    for j = 1, m do
      if t[j] == at then i = j end
    end
    if not i then return end
    k = math.min(n, (num[i + 1] or last + 1) - num[i])
    if k == 0 then return end
  else
    local j = 1
    while j <= m and t[j] <= cut do j = j + 1 end
    if j > m then return end
    k = math.min(n, last - num[j] + 1)
    if k <= 0 then return end
    -- The members left without a unit, from i on: they go, but the newest.
    i = j
    while i <= m and num[i] <= last - k do i = i + 1 end
  end
  local old, new = {}, {F('%d', -(last - k)), '#'}
  if at and i < m then
    -- The members after i are renumbered; i goes when it is left empty.
    if num[i + 1] - num[i] == k then old[1] = F('%d', num[i]) end
    for j = i + 1, m do
      old[#old + 1] = F('%d', num[j])
      new[#new + 1], new[#new + 2] = F('%d', t[j]), F('%d', num[j] - k)
    end
  elseif not at and i <= m then
    for j = i, m do old[#old + 1] = F('%d', num[j]) end
    new[3], new[4] = F('%d', t[m]), F('%d', last - k + 1)
  end
  if #old > 0 then redis.call('ZREM', key, unpack(old)) end
  redis.call('ZADD', key, unpack(new))
end
