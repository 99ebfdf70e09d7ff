-- sliding_log.lua: internal/algo.SlidingLogStep on a ZSET: one entry per
-- admitted event, scored by its time in µs, its member a per-key sequence
-- number (a small integer, which a listpack stores in 1 to 5 bytes). The
-- last sequence number used is kept in the same ZSET as the member '#'
-- scored -seq: negative, so it is never counted, expired or the newest.
ALG[2] = {}

-- zadd_chunks adds pairs (score, member) in bounded batches (Lua's unpack
-- has a stack limit).
local function zadd_chunks(key, args)
  local i, m = 1, #args
  while i <= m do
    local j = math.min(i + 999, m)
    redis.call('ZADD', key, unpack(args, i, j))
    i = j + 1
  end
end

-- st = {count, newest, pending, now}: entries in (now-P, now], the newest
-- entry's time (-1 if none), events decided but not written yet (AllowMulti
-- on one key) and the time used.
ALG[2].decide = function(key, now, n, p, st)
  local count, newest, pend
  if st then
    count, newest, pend = st[1], st[2], st[3]
    if now < st[4] then now = st[4] end
  else
    local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    newest = -1
    if top[2] then newest = math.max(tonumber(top[2]), -1) end
    if now < newest then now = newest end
    pend = 0
    count = 0
    if newest > now - p.period then
      count = redis.call('ZCOUNT', key, '(' .. str(math.max(now - p.period, -1)), '+inf')
    end
    st = {count, newest, 0, now}
  end
  local total = count + pend
  local nw = newest
  if pend > 0 then nw = now end
  if n > 0 and total + n > p.rate then
    local k = total + n - p.rate
    local retry = p.period
    if k <= count then
      local e = redis.call('ZRANGEBYSCORE', key, '(' .. str(math.max(now - p.period, -1)), '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)
      retry = tonumber(e[2]) + p.period - now
    end
    return st, 0, math.max(p.rate - total, 0), retry, nw + p.period - now, now
  end
  local reset = 0
  if n > 0 then
    reset = p.period
  elseif total > 0 then
    reset = nw + p.period - now
  end
  if n == 0 then return st, 1, math.max(p.rate - total, 0), 0, reset, now end
  return {count, newest, pend + n, now}, 1, math.max(p.rate - total - n, 0), 0, reset, now
end

ALG[2].commit = function(key, st, p, slack)
  local now, pend = st[4], st[3]
  local seq = 0
  local s = redis.call('ZSCORE', key, '#')
  if s then seq = -tonumber(s) end
  -- At most pend + 2 of the oldest expired entries (and '#', written again
  -- below) go: the work follows the cost admitted, not the log's length,
  -- and every commit removes more expired entries than it adds, which
  -- keeps a key within Rate + 24 entries, as sliding_log.lua does.
  if now - p.period >= 0 then
    local old = redis.call('ZCOUNT', key, '-inf', str(now - p.period))
    if old > 0 then redis.call('ZREMRANGEBYRANK', key, 0, str(math.min(old, pend + 3) - 1)) end
  end
  local args, t = {str(-(seq + pend)), '#'}, str(now)
  for i = 1, pend do
    args[#args + 1] = t
    args[#args + 1] = str(seq + i)
  end
  zadd_chunks(key, args)
  redis.call('PEXPIRE', key, ttl_ms(p.period, slack))
end

-- ret is internal/algo.SlidingLogReturn: up to n entries stamped at leave.
-- The entries at or before at-P go too: internal/algo dropped them when it
-- admitted the entries stamped at, and the log may still hold them (it trims
-- at every 8th admission). Otherwise, with the newest entry returned,
-- nothing would keep a later decision on a clock that ran back from
-- counting them again.
ALG[2].ret = function(key, now, at, n, p)
  local ms = redis.call('ZRANGEBYSCORE', key, str(at), str(at), 'LIMIT', 0, n)
  if #ms == 0 then return end
  redis.call('ZREM', key, unpack(ms))
  if at - p.period >= 0 then redis.call('ZREMRANGEBYSCORE', key, 0, str(at - p.period)) end
end
