-- lib_ms_log.lua: the sliding log in the millisecond layout
-- (WithMillisecondLayout), the layout of a widely used Python/Redis
-- sliding-log script, so that a fleet still running such workers shares one
-- quota with sluice: key rl:<key>, scores in ms, members "<now_ms>-<8 hex>",
-- a trim of expired entries (at most the admission's cost + 2, so that its
-- work follows the cost, not the log's length) and PEXPIRE window on
-- admission, and the Python script's count: the entries with a score above
-- now_ms - window. Time is Redis's (the Python workers use their own
-- clocks); it is not clamped, as the Python script's is not.
ALG[6] = {}

-- st = {count, newest_ms, pending, random}
ALG[6].decide = function(key, now, n, p, st)
  local W = idiv(p.period, 1000)
  local ms = idiv(now, 1000)
  if not st then
    local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    local newest = -1
    if top[2] then newest = tonumber(top[2]) end
    st = {redis.call('ZCOUNT', key, '(' .. str(ms - W), '+inf'), newest, 0, p.x}
  end
  local count, newest, pend = st[1], st[2], st[3]
  local total = count + pend
  local nw = newest
  if pend > 0 then nw = math.max(nw, ms) end
  if n > 0 and total + n > p.rate then
    local k = total + n - p.rate
    local kth = ms
    if k <= count then
      local e = redis.call('ZRANGEBYSCORE', key, '(' .. str(ms - W), '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)
      kth = tonumber(e[2])
    end
    return st, 0, math.max(p.rate - total, 0), (kth + W) * 1000 - now, (nw + W) * 1000 - now, now
  end
  if n > 0 then nw = math.max(nw, ms) end
  local reset = 0
  if total + n > 0 then reset = (nw + W) * 1000 - now end
  if n == 0 then return st, 1, math.max(p.rate - total, 0), 0, reset, now end
  return {count, newest, pend + n, st[4], now}, 1, math.max(p.rate - total - n, 0), 0, reset, now
end

ALG[6].commit = function(key, st, p, slack)
  local W = idiv(p.period, 1000)
  local ms = idiv(st[5], 1000)
  -- At most pending + 2 of the oldest expired entries go, as in
  -- ms_log.lua.
  local old = redis.call('ZCOUNT', key, '-inf', str(ms - W))
  if old > 0 then redis.call('ZREMRANGEBYRANK', key, 0, str(math.min(old, st[3] + 2) - 1)) end
  local r = tonumber(st[4]) or 0
  local args, t = {}, str(ms)
  for i = 0, st[3] - 1 do
    args[#args + 1] = t
    args[#args + 1] = string.format('%d-%08x', ms, imod(r + i, 4294967296))
  end
  local i, m = 1, #args
  while i <= m do
    local j = math.min(i + 999, m)
    redis.call('ZADD', key, unpack(args, i, j))
    i = j + 1
  end
  redis.call('PEXPIRE', key, W + slack)
end

ALG[6].ret = function(key, now, at, n, p)
  local s = str(idiv(at, 1000))
  local ms = redis.call('ZRANGEBYSCORE', key, s, s, 'LIMIT', 0, n)
  if #ms > 0 then redis.call('ZREM', key, unpack(ms)) end
end
