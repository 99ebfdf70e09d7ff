-- gcra.lua: GCRA, internal/algo.GCRAStep (gcra_step), GCRACharge
-- (gcra_charge) and GCRAReturn (gcra_return), and the token bucket, which is kept as a TAT too
-- (internal/algo.Bucket: TokenBucketStep and TokenBucketReturn are GCRA's
-- math), under its own key letter. The value is the theoretical arrival
-- time TAT + frac/R: one integer (µs) when frac is 0, "tat:frac" otherwise.
-- The limit's values are full = cap*P, P and R (internal/algo.Params).

-- gcra_norm reads a TAT under this limit: {-1, R} stands for the epoch
-- (the zero TAT is an untouched key); a frac written under another Rate is
-- cut to R-1, within the same µs.
local function gcra_norm(at, frac, R)
  if at == -1 and frac == R then return 0, 0 end
  if frac >= R then return at, R - 1 end
  return at, frac
end

-- gcra_val is the value of a TAT; the epoch itself is kept apart from the
-- zero value as {-1, R}.
local function gcra_val(at, frac, R)
  if at == 0 and frac == 0 then at, frac = -1, R end
  if frac == 0 then return F('%d', at) end
  return string.format('%d:%d', at, frac)
end

-- gcra_ahead reads the value v (false: absent) under this limit
-- (internal/algo's TAT.ahead): the TAT, At + Frac/R µs, when it lies after
-- now; nothing for an untouched key or a bucket that is full at now.
local function gcra_ahead(v, now, R)
  if not v then return end
  local at, frac = split(v)
  frac = frac or 0
  if at == 0 and frac == 0 then return end
  at, frac = gcra_norm(at, frac, R)
  if at > now or (at == now and frac > 0) then return at, frac end
end

-- gcra_step decides n at now on the value v (false: absent), with the
-- results of every counter's step (fw_step).
local function gcra_step(v, now, n, full, P, R)
  local d = 0 -- the scaled deficit R*(TAT-now)
  local at, frac = gcra_ahead(v, now, R)
  if at then
    if at - now > floor(full / R) + 1 then
      -- More than a full bucket ahead (Burst lowered, clock behind):
      -- nothing is admitted, and the times count exactly from the TAT.
      local ahead = at - now
      local reset = ahead + floor((frac + R - 1) / R)
      if n > 0 then return 0, 0, ahead - floor(-(frac + n * P - full) / R), reset, now end
      return 1, 0, 0, reset, now
    end
    d = (at - now) * R + frac
  end
  local d2 = d + n * P
  if n > 0 and d2 > full then
    return 0, floor(math.max(full - d, 0) / P), floor((d2 - full + R - 1) / R), floor((d + R - 1) / R), now
  end
  local reset = floor((d2 + R - 1) / R)
  local rem = floor(math.max(full - d2, 0) / P)
  if n == 0 then return 1, rem, 0, reset, now end
  local q = floor(d2 / R)
  local s = gcra_val(now + q, d2 - q * R, R)
  return 1, rem, 0, reset, now, s, false
end

-- gcra_charge is gcra_step for a limit that counts every hit: the TAT
-- moves on by n emission intervals, up to a scaled deficit of
-- MAX_BUCKET_DEBT (internal/algo.MaxBucketDebt) ahead of now, whatever the decision,
-- which denies a cost of 0 too while the TAT is beyond the burst. A denial
-- waits until a cost of 1 (of 0 for a cost of 0) is admitted. n*P is
-- inexact only far above 2^52, where the bound takes over.
local function gcra_charge(v, now, n, full, P, R)
  local d = 0
  local at, frac = gcra_ahead(v, now, R)
  if at then
    if at - now > floor(MAX_BUCKET_DEBT / R) then
      d = MAX_BUCKET_DEBT
    else
      d = math.min((at - now) * R + frac, MAX_BUCKET_DEBT)
    end
  end
  local d2 = math.min(d + n * P, MAX_BUCKET_DEBT)
  local ok, retry = 1, 0
  if d + n * P > full then
    ok = 0
    retry = floor((d2 + math.min(n, 1) * P - full + R - 1) / R)
  end
  local rem = floor(math.max(full - d2, 0) / P)
  local reset = floor((d2 + R - 1) / R)
  if n == 0 then return ok, rem, retry, reset, now end
  local q = floor(d2 / R)
  local s = gcra_val(now + q, d2 - q * R, R)
  return ok, rem, retry, reset, now, s, false
end

-- gcra_credit is what n units taken at at are still worth at now, in
-- scaled units (internal/algo's bucketCredit): n*P less the refill since.
local function gcra_credit(at, now, n, P, R)
  local c = n * P
  local el = now - at
  if el <= 0 then return c end
  if el >= floor((c + R - 1) / R) then return 0 end
  return c - el * R
end

-- gcra_return gives back n emission intervals taken at at (false: now):
-- the TAT moves back by what they are still worth at now (n*P less the
-- refill since, in scaled units; n is at most the bound of a charged
-- deficit's worth, so that n*P stays exact); a TAT at or before now is an
-- untouched key.
local function gcra_return(key, now, at, n, _, P, R)
  local v = redis.call('GET', key)
  if not v then return end
  local t, frac = split(v)
  frac = frac or 0
  if t == 0 and frac == 0 then return end
  local c = gcra_credit(at or now, now, math.min(n, floor(MAX_BUCKET_DEBT / P) + 2), P, R)
  if c == 0 then return end
  t, frac = gcra_norm(t, frac, R)
  local q = floor(c / R)
  t, frac = t - q, frac - (c - q * R)
  if frac < 0 then t, frac = t - 1, frac + R end
  if t < now or (t == now and frac == 0) then
    redis.call('DEL', key)
    return
  end
  redis.call('SET', key, gcra_val(t, frac, R), 'KEEPTTL')
end
