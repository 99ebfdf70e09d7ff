-- sliding_window.lua: the sliding-window counter,
-- internal/algo.SlidingWindowStep (sw_step), SlidingWindowCharge
-- (sw_charge) and SlidingWindowReturn (sw_return). The value is
-- "start:prev:cur".

local function sw_reset(ws, now, prev, cur, P)
  if cur > 0 then return ws + 2 * P - now end
  if prev > 0 then return ws + P - now end
  return 0
end

-- sw_retry is the closed form of the earliest time at which the counts
-- admit n: floor(x*(P-e)/P) <= a exactly when e >= P - floor(((a+1)*P-1)/x).
-- Within the current window, or else in the next one, where the current
-- count is the previous window's and nothing is counted yet.
local function sw_retry(ws, now, prev, cur, rate, P, n)
  local a = rate - n - cur
  if a >= 0 and prev > 0 then
    local e2 = math.max(P - floor(((a + 1) * P - 1) / prev), 0)
    if e2 < P then return ws + e2 - now end
  end
  local e3 = 0
  if cur > 0 then e3 = math.min(math.max(P - floor(((rate - n + 1) * P - 1) / cur), 0), P) end
  return ws + P + e3 - now
end

-- sw_at is the state at now (internal/algo's Counter.at): now itself
-- (never before the state's start: time does not go backwards for a key),
-- the start ws of now's window, and the counts of the window before it and
-- of it.
local function sw_at(v, now, P)
  local start, prev, cur = 0, 0, 0
  if v then
    start, prev, cur = split(v)
  end
  if (prev > 0 or cur > 0) and now < start then now = start end
  local ws = now - now % P
  if start == ws then return now, ws, prev, cur end
  if start == ws - P then return now, ws, cur, 0 end
  return now, ws, 0, 0
end

-- sw_step decides n at now on the value v (false: absent) under rate per
-- period P µs, with the results of every counter's step (fw_step).
local function sw_step(v, now, n, rate, P)
  local ws, prev, cur
  now, ws, prev, cur = sw_at(v, now, P)
  local e = now - ws
  local count = floor(prev * (P - e) / P) + cur
  if n > 0 and count + n > rate then
    local retry = sw_retry(ws, now, prev, cur, rate, P, n)
    local reset = sw_reset(ws, now, prev, cur, P)
    return 0, math.max(rate - count, 0), retry, reset, now
  end
  if n == 0 then
    local reset = sw_reset(ws, now, prev, cur, P)
    return 1, math.max(rate - count, 0), 0, reset, now
  end
  -- In the same window (a current count), the key already expires when
  -- its count stops mattering.
  local keep = cur > 0
  cur = cur + n
  return 1, rate - count - n, 0, ws + 2 * P - now, now, string.format('%d:%d:%d', ws, prev, cur), keep
end

-- sw_charge is sw_step for a limit that counts every hit: n is counted in
-- the current window, up to floor((MAX_EXACT-1)/P) - 1 (internal/algo's
-- debtOf: so that a count times P stays exact), whatever the decision,
-- which denies a cost of 0 too while the weighted count is above rate. A
-- denial waits until a cost of 1 (of 0 for a cost of 0) is admitted.
local function sw_charge(v, now, n, rate, P)
  local ws, prev, cur
  now, ws, prev, cur = sw_at(v, now, P)
  local w = floor(prev * (P - (now - ws)) / P)
  local cur2 = math.min(cur + n, floor((MAX_EXACT - 1) / P) - 1)
  local ok, retry = 1, 0
  if w + cur + n > rate then
    ok = 0
    retry = sw_retry(ws, now, prev, cur2, rate, P, math.min(n, 1))
  end
  local rem = math.max(rate - w - cur2, 0)
  local reset = sw_reset(ws, now, prev, cur2, P)
  if n == 0 then return ok, rem, retry, reset, now end
  return ok, rem, retry, reset, now, string.format('%d:%d:%d', ws, prev, cur2), cur > 0
end

-- sw_return gives back n units taken at at (false: now, as a decision
-- would use it): they leave the count of at's window, when the key still
-- holds it (current or previous).
local function sw_return(key, now, at, n, _, P)
  local v = redis.call('GET', key)
  if not v then return end
  local start, prev, cur = split(v)
  at = at or math.max(now, start)
  local w = at - at % P
  if w == start then
    cur = math.max(cur - n, 0)
  elseif w == start - P then
    prev = math.max(prev - n, 0)
  else
    return
  end
  redis.call('SET', key, string.format('%d:%d:%d', start, prev, cur), 'KEEPTTL')
end
