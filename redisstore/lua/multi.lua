-- multi.lua: the driver of AllowMulti, all or nothing, after the prologue
-- and every algorithm's file: each request is decided by its algorithm's
-- step (single.lua), nothing is written until all are admitted.
-- ARGV = now µs or '' (Redis TIME), TTL slack ms, then 5 values per key
-- KEYS[i]: kind, n, the limit's values (A, B, C; '' when unused). Requests
-- on the same key are decided as if made one after the other. Returns {all
-- allowed, time, then allowed, remaining, retry, reset per request}; when
-- any is denied nothing is written, and the requests that did not block
-- report a peek of their state as it is (allowed 0, retry 0): not counting
-- the earlier requests of the call, which are not counted either.
-- A request of a limit that counts every hit (kind 7 and after, its
-- algorithm's charge) is counted whatever the call decides, and its denial
-- denies the call: on a denial its value is written all the same, and its
-- decision reported denied. Requests on one key share their Counting
-- (multi.go), so such a key holds no admission of the others.
local STEP = {fw_step, false, sw_step, gcra_step, gcra_step, false, fw_charge, false, sw_charge, gcra_charge, gcra_charge}
local LOG = {false, {sl_decide, sl_write}, false, false, false, {ms_decide, ms_write}}
-- Per key: the value read (false: absent), the value and reset the call's
-- admissions leave (counters), or the units they add, the time they are
-- stamped at, the request whose limit values write them and what the log's
-- decision tells its write (logs).
local stored, value, reset, units, at, first, state = {}, {}, {}, {}, {}, {}, {}
-- decide is request i's decision of n, after the call's earlier requests
-- on its key, or when alone as if it were the call's only request.
local function decide(i, n, alone)
  local b = 3 + (i - 1) * 5
  local key, kind = KEYS[i], tonumber(ARGV[b])
  local A, B, C = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local step = STEP[kind]
  if step then
    local v = not alone and value[key]
    if not v then
      v = stored[key]
      if v == nil then
        v = redis.call('GET', key)
        stored[key] = v
      end
    end
    local ok, rem, retry, rs, _, val = step(v, now, n, A, B, C)
    if val and not alone then value[key], reset[key] = val, rs end
    return ok, rem, retry, rs
  end
  local pend = 0
  if not alone then pend = units[key] or 0 end
  local ok, rem, retry, rs, used, last, same = LOG[kind][1](key, now, n, A, B, C, pend)
  if not alone then
    first[key] = first[key] or i
    if ok == 1 and n > 0 then units[key], at[key], state[key] = pend + n, used, {last, same} end
  end
  return ok, rem, retry, rs
end
local out = {1, now}
for i = 1, #KEYS do
  local ok, rem, retry, rs = decide(i, tonumber(ARGV[3 + (i - 1) * 5 + 1]), false)
  if ok == 0 then out[1] = 0 end
  local o = 2 + (i - 1) * 4
  out[o + 1], out[o + 2], out[o + 3], out[o + 4] = ok, rem, retry, rs
end
if out[1] == 0 then
  for i = 1, #KEYS do
    local key, o = KEYS[i], 2 + (i - 1) * 4
    if tonumber(ARGV[3 + (i - 1) * 5]) > 6 then
      out[o + 1] = 0
      if value[key] then
        redis.call('SET', key, value[key], 'PX', px(reset[key]))
        value[key] = nil
      end
    elseif out[o + 1] == 1 then
      local _, rem, _, rs = decide(i, 0, true)
      out[o + 1], out[o + 2], out[o + 4] = 0, rem, rs
    end
  end
  return out
end
for i = 1, #KEYS do
  local key = KEYS[i]
  if value[key] then
    redis.call('SET', key, value[key], 'PX', px(reset[key]))
    value[key] = nil
  elseif units[key] and first[key] then
    local b = 3 + (first[key] - 1) * 5
    LOG[tonumber(ARGV[b])][2](key, at[key], units[key], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]), state[key][1], state[key][2], true)
    units[key] = nil
  end
end
return out
