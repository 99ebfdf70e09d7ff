-- sliding_window.lua: internal/algo.SlidingWindowStep. The value is
-- "start:prev:cur".
ALG[3] = {}

local function sw_retry(ws, now, prev, cur, p, n)
  local P = p.period
  local a = p.rate - n - cur
  if a >= 0 and prev > 0 then
    local e = math.max(P - idiv((a + 1) * P - 1, prev), 0)
    if e < P then return ws + e - now end
  end
  local e = 0
  if cur > 0 then e = math.min(math.max(P - idiv((p.rate - n + 1) * P - 1, cur), 0), P) end
  return ws + P + e - now
end

local function sw_reset(ws, now, prev, cur, P)
  if cur > 0 then return ws + 2 * P - now end
  if prev > 0 then return ws + P - now end
  return 0
end

ALG[3].decide = function(key, now, n, p, st)
  if not st then
    local v = redis.call('GET', key)
    if v then
      local a, b, c = split(v)
      st = {a, b or 0, c or 0, 0}
    else
      st = {0, 0, 0, 0}
    end
  end
  local start, sprev, scur = st[1], st[2], st[3]
  if (sprev > 0 or scur > 0) and now < start then now = start end
  local P = p.period
  local ws = now - imod(now, P)
  local prev, cur = 0, 0
  if start == ws then
    prev, cur = sprev, scur
  elseif start == ws - P then
    prev = scur
  end
  local e = now - ws
  local count = idiv(prev * (P - e), P) + cur
  if n > 0 and count + n > p.rate then
    return st, 0, math.max(p.rate - count, 0), sw_retry(ws, now, prev, cur, p, n), sw_reset(ws, now, prev, cur, P), now
  end
  if n == 0 then
    return st, 1, math.max(p.rate - count, 0), 0, sw_reset(ws, now, prev, cur, P), now
  end
  cur = cur + n
  local reset = sw_reset(ws, now, prev, cur, P)
  return {ws, prev, cur, reset}, 1, p.rate - count - n, 0, reset, now
end

local function sw_val(st) return str(st[1]) .. ':' .. str(st[2]) .. ':' .. str(st[3]) end

ALG[3].commit = function(key, st, p, slack)
  redis.call('SET', key, sw_val(st), 'PX', string.format('%d', ttl_ms(st[4], slack)))
end

ALG[3].ret = function(key, now, at, n, p)
  local st = ALG[3].decide(key, now, 0, p, nil)
  local w = at - imod(at, p.period)
  if w == st[1] then
    st[3] = math.max(st[3] - n, 0)
  elseif w == st[1] - p.period then
    st[2] = math.max(st[2] - n, 0)
  else
    return
  end
  if redis.call('EXISTS', key) == 1 then redis.call('SET', key, sw_val(st), 'KEEPTTL') end
end
