-- gcra.lua: internal/algo.GCRAStep. The value is the theoretical arrival
-- time TAT + frac/R: one integer (µs) when frac is 0, "tat:frac" otherwise.
ALG[5] = {}

ALG[5].decide = function(key, now, n, p, st)
  if not st then
    local v = redis.call('GET', key)
    if v then
      local a, b = split(v)
      st = {a, b or 0, 0}
    else
      st = {0, 0, 0}
    end
  end
  local at, frac = st[1], st[2]
  local full = p.cap * p.P
  local d = 0
  if at > now or (at == now and frac > 0) then
    if at - now > idiv(full, p.R) + 1 then
      d = full
    else
      d = math.min((at - now) * p.R + frac, full)
    end
  end
  local d2, ok, rem, retry, reset = bucket_decide(d, p, n)
  if ok == 0 or n == 0 then return st, ok, rem, retry, reset, now end
  local q = idiv(d2, p.R)
  return {now + q, d2 - q * p.R, reset}, 1, rem, 0, reset, now
end

local function gcra_val(at, frac)
  if frac == 0 then return str(at) end
  return str(at) .. ':' .. str(frac)
end

ALG[5].commit = function(key, st, p, slack)
  redis.call('SET', key, gcra_val(st[1], st[2]), 'PX', ttl_ms(st[3], slack))
end

-- ret is internal/algo.GCRAReturn: the TAT moves back n emission intervals,
-- bounded below by now.
ALG[5].ret = function(key, now, at, n, p)
  local v = redis.call('GET', key)
  if not v then return end
  local t, frac = split(v)
  frac = frac or 0
  if t < now or (t == now and frac == 0) then
    redis.call('DEL', key)
    return
  end
  local d = math.min((t - now) * p.R + frac, p.cap * p.P) - n * p.P
  if d <= 0 then
    redis.call('DEL', key)
    return
  end
  local q = idiv(d, p.R)
  redis.call('SET', key, gcra_val(now + q, d - q * p.R), 'KEEPTTL')
end
