-- gcra.lua: internal/algo.GCRAStep. The value is the theoretical arrival
-- time TAT + frac/R: one integer (µs) when frac is 0, "tat:frac" otherwise.
ALG[5] = {}

-- gcra_deficit is the scaled deficit R*(TAT-now), between 0 and cap*P; the
-- zero TAT is an untouched key at any time.
local function gcra_norm(at, frac, p)
  if at == -1 and frac == p.R then return 0, 0 end
  if frac >= p.R then return at, p.R - 1 end
  return at, frac
end

-- gcra_deficit returns the deficit, or false and the normalized TAT when it
-- lies more than a full bucket ahead.
local function gcra_deficit(at, frac, now, p)
  if at == 0 and frac == 0 then return 0 end
  at, frac = gcra_norm(at, frac, p)
  if at < now or (at == now and frac == 0) then return 0 end
  if at - now > idiv(p.cap * p.P, p.R) + 1 then return false, at, frac end
  return (at - now) * p.R + frac
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
  local d, at, frac = gcra_deficit(st[1], st[2], now, p)
  if not d then
    local ahead = at - now
    local reset = ahead + ceildiv(frac, p.R)
    if n > 0 then return st, 0, 0, ahead - idiv(-(frac + n * p.P - p.cap * p.P), p.R), reset, now end
    return st, 1, 0, 0, reset, now
  end
  local d2, ok, rem, retry, reset = bucket_decide(d, p, n)
  if ok == 0 or n == 0 then return st, ok, rem, retry, reset, now end
  local at, frac = tat_at(now, d2, p)
  return {at, frac, reset}, 1, rem, 0, reset, now
end

local function gcra_val(at, frac)
  if frac == 0 then return str(at) end
  return str(at) .. ':' .. str(frac)
end

ALG[5].commit = function(key, st, p, slack)
  redis.call('SET', key, gcra_val(st[1], st[2]), 'PX', string.format('%d', ttl_ms(st[3], slack)))
end

-- ret is internal/algo.GCRAReturn: the TAT moves back by what n emission
-- intervals taken at at are still worth at now; one at or before now is an untouched key.
ALG[5].ret = function(key, now, at, n, p)
  local v = redis.call('GET', key)
  if not v then return end
  local t, frac = split(v)
  frac = frac or 0
  if t == 0 and frac == 0 then return end
  local c = bucket_credit(at, now, n, p)
  if c == 0 then return end
  t, frac = gcra_norm(t, frac, p)
  local q = idiv(c, p.R)
  t, frac = t - q, frac - (c - q * p.R)
  if frac < 0 then t, frac = t - 1, frac + p.R end
  if t < now or (t == now and frac == 0) then
    redis.call('DEL', key)
    return
  end
  if t == 0 and frac == 0 then t, frac = -1, p.R end
  redis.call('SET', key, gcra_val(t, frac), 'KEEPTTL')
end

-- The token bucket is kept as a TAT too (internal/algo.Bucket): the same
-- functions, under its own key letter.
ALG[4] = ALG[5]
