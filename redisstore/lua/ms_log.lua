-- ms_log.lua: the sliding log in the millisecond layout
-- (WithMillisecondLayout): ms_decide and ms_write for a decision
-- (internal/algo.SlidingLogStep counted in ms), ms_return for Return. It is
-- the layout of a widely used Python/Redis sliding-log script, so that a
-- fleet still running such workers shares one quota with sluice: key
-- rl:<key>, scores in ms, members "<ms>-<8 hex>", the count is the entries
-- scored above now_ms - window (what the Python script's ZREMRANGEBYSCORE 0
-- now-window leaves and its ZCARD counts), and an admission trims (at most
-- n + 2 entries), adds and sets PEXPIRE window, as the Python script does.
-- Time is Redis's; it is not clamped, as the Python script's is not. A
-- denial or a peek writes nothing. The limit's values are rate, the window
-- W in ms, and a random 32-bit integer that numbers the new members.

-- ms_decide decides n at now, after pend events that AllowMulti decided at
-- the same time and has not written yet, with the results of sl_decide.
local function ms_decide(key, now, n, rate, W, _, pend)
  local ms = floor(now / 1000)
  local lo = '(' .. F('%d', ms - W)
  local count = redis.call('ZCOUNT', key, lo, '+inf')
  local newest = -1
  if count > 0 then newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]) end
  if pend > 0 then newest = math.max(newest, ms) end
  local total = count + pend
  if n > 0 and total + n > rate then
    local k, kth = total + n - rate, ms
    if k <= count then
      -- By rank (the expired entries come first): O(log N), where an
      -- offset in ZRANGEBYSCORE's LIMIT walks the entries one by one.
      local r = F('%d', redis.call('ZCOUNT', key, '-inf', F('%d', ms - W)) + k - 1)
      kth = tonumber(redis.call('ZRANGE', key, r, r, 'WITHSCORES')[2])
    end
    return 0, math.max(rate - total, 0), (kth + W) * 1000 - now, (newest + W) * 1000 - now, now
  end
  if n == 0 then
    local reset = 0
    if total > 0 then reset = (newest + W) * 1000 - now end
    return 1, math.max(rate - total, 0), 0, reset, now
  end
  return 1, math.max(rate - total - n, 0), 0, (math.max(newest, ms) + W) * 1000 - now, now
end

-- ms_write writes the admission of n at now. At most n + 2 of the oldest
-- expired entries go (the Python script trims them all, and counts after
-- its own trim; sluice counts above now - window and needs no trim to
-- decide): the work follows the cost admitted, and an admission removes
-- more expired entries than it adds.
local function ms_write(key, now, n, _, W, rnd)
  local ms = floor(now / 1000)
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
  redis.call('PEXPIRE', key, W + slack)
end

-- ms_return gives back up to n entries stamped in at's millisecond (a
-- false at: the n newest entries), at most MAX_MILLISECOND_UNITS.
local function ms_return(key, _, at, n)
  n = math.min(n, MAX_MILLISECOND_UNITS)
  if not at then
    local ms = redis.call('ZREVRANGE', key, '0', F('%d', n - 1))
    if #ms > 0 then redis.call('ZREM', key, unpack(ms)) end
    return
  end
  local s = F('%d', floor(at / 1000))
  local ms = redis.call('ZRANGEBYSCORE', key, s, s, 'LIMIT', 0, n)
  if #ms > 0 then redis.call('ZREM', key, unpack(ms)) end
end
