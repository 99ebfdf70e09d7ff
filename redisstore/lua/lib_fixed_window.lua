-- fixed_window.lua: internal/algo.FixedWindowStep. The value is one integer,
-- start + count, when count < period (start is a multiple of period, so it
-- decodes exactly), and "start:count" otherwise.
ALG[1] = {}

local function fw_get(key)
  local v = redis.call('GET', key)
  if not v then return 0, 0 end
  local a, b = split(v)
  if b then return a, b end
  return nil, a
end

ALG[1].decide = function(key, now, n, p, st)
  local start, count
  if st then
    start, count = st[1], st[2]
  else
    start, count = fw_get(key)
    if not start then
      local c = imod(count, p.period)
      start, count = count - c, c
    end
  end
  if count > 0 and now < start then now = start end
  local ws = now - imod(now, p.period)
  local c = 0
  if count > 0 and start == ws then c = count end
  local e = ws + p.period - now
  if n > 0 and c + n > p.rate then
    return st or {start, count, 0}, 0, math.max(p.rate - c, 0), e, e, now
  end
  if n == 0 then
    local reset = 0
    if c > 0 then reset = e end
    return st or {start, count, 0}, 1, math.max(p.rate - c, 0), 0, reset, now
  end
  c = c + n
  return {ws, c, e}, 1, p.rate - c, 0, e, now
end

ALG[1].commit = function(key, st, p, slack)
  local v
  if st[2] < p.period then v = str(st[1] + st[2]) else v = str(st[1]) .. ':' .. str(st[2]) end
  redis.call('SET', key, v, 'PX', string.format('%d', ttl_ms(st[3], slack)))
end

ALG[1].ret = function(key, now, at, n, p)
  local st = ALG[1].decide(key, now, 0, p, nil)
  if st[2] > 0 and at - imod(at, p.period) == st[1] then
    local c = math.max(st[2] - n, 0)
    local v
    if c < p.period then v = str(st[1] + c) else v = str(st[1]) .. ':' .. str(c) end
    redis.call('SET', key, v, 'KEEPTTL')
  end
end
