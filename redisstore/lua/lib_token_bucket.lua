-- token_bucket.lua: internal/algo.TokenBucketStep. The value is
-- "deficit:last", the deficit in scaled units (one token is P).
ALG[4] = {}

ALG[4].decide = function(key, now, n, p, st)
  if not st then
    local v = redis.call('GET', key)
    if v then
      local a, b = split(v)
      st = {a, b or 0, 0}
    else
      st = {0, 0, 0}
    end
  end
  local d = st[1]
  if d > 0 then
    if now < st[2] then now = st[2] end
    local el = now - st[2]
    if el >= ceildiv(d, p.R) then d = 0 else d = d - el * p.R end
  end
  local d2, ok, rem, retry, reset = bucket_decide(d, p, n)
  if ok == 0 or n == 0 then return st, ok, rem, retry, reset, now end
  return {d2, now, reset}, 1, rem, 0, reset, now
end

ALG[4].commit = function(key, st, p, slack)
  redis.call('SET', key, str(st[1]) .. ':' .. str(st[2]), 'PX', string.format('%d', ttl_ms(st[3], slack)))
end

ALG[4].ret = function(key, now, at, n, p)
  local v = redis.call('GET', key)
  if not v then return end
  local d, last = split(v)
  d = math.max(d - bucket_credit(at, now, n, p), 0)
  redis.call('SET', key, str(d) .. ':' .. str(last or 0), 'KEEPTTL')
end
