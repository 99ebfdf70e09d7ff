-- gcra.lua: internal/algo.GCRAStep. The value is the theoretical arrival
-- time TAT + frac/R: one integer (µs) when frac is 0, "tat:frac" otherwise.
ALG[5] = {}

-- gcra_deficit is the scaled deficit R*(TAT-now), between 0 and cap*P; the
-- zero TAT is an untouched key at any time.
local function gcra_deficit(at, frac, now, p)
  if (at == 0 and frac == 0) or at < now or (at == now and frac == 0) then return 0 end
  local full = p.cap * p.P
  if at - now > idiv(full, p.R) + 1 then return full end
  return math.min((at - now) * p.R + frac, full)
end

-- tat_at is the TAT a scaled deficit d > 0 at now stands for; the epoch
-- itself is kept apart from the zero value as {-1, R}.
local function tat_at(now, d, p)
  local q = idiv(d, p.R)
  local at, frac = now + q, d - q * p.R
  if at == 0 and frac == 0 then return -1, p.R end
  return at, frac
end

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
  local d2, ok, rem, retry, reset = bucket_decide(gcra_deficit(st[1], st[2], now, p), p, n)
  if ok == 0 or n == 0 then return st, ok, rem, retry, reset, now end
  local at, frac = tat_at(now, d2, p)
  return {at, frac, reset}, 1, rem, 0, reset, now
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
  local d = gcra_deficit(t, frac or 0, now, p) - n * p.P
  if d <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('SET', key, gcra_val(tat_at(now, d, p)), 'KEEPTTL')
end
