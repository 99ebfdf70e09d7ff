-- batch.lua: the driver of the batch script (batcher.exec), which runs
-- the independent decisions of concurrent callers in one script run so that
-- the cost of starting a script and of reading TIME is shared. scripts.go
-- puts before it the prologue and every algorithm's file: a batched
-- decision runs the same step as a single one (single.lua), but for the
-- at-rest SET NX GET of the counters, which this driver makes with a value
-- it computes once per group (most of a decision's cost in Redis is its
-- Lua, not its one call), and for a key's calls after its denial in a
-- group, which repeat that denial (denied, below).
-- ARGV = now µs or '' (Redis TIME), TTL slack ms, then one group of 7
-- values per distinct set of arguments: kind (7 and after: a limit that
-- counts every hit, running its algorithm's charge), n, the limit's values (A, B,
-- C; '' when unused), now µs (test only, else ''), and how many of the
-- following KEYS it decides.
-- Returns, after a base time (the first decision's), the decisions in KEYS
-- order, compact since the client parses every value: remaining, or
-- -(remaining+1) when denied, followed by the retry µs; then the reset µs
-- when the decision used the base time, else -(reset+1) and the time used
-- minus the base. An admission at the batch's time is two values.
local FMT = {}
F = function(_, x)
  local s = FMT[x]
  if not s then
    s = string.format('%d', x)
    FMT[x] = s
  end
  return s
end
local STEP = {fw_step, false, sw_step, gcra_step, gcra_step, false, fw_charge, false, sw_charge, gcra_charge, gcra_charge}
local LOG = {false, {sl_decide, sl_write}, false, false, false, {ms_decide, ms_write}}
local out, o, ki = {0}, 1, 0
local base
-- emit appends one decision to out.
local function emit(allowed, rem, retry, reset, used)
  if not base then
    base = used
    out[1] = base
  end
  if allowed == 1 then
    out[o + 1] = rem
    o = o + 1
  else
    out[o + 1], out[o + 2] = -rem - 1, retry
    o = o + 2
  end
  if used == base then
    out[o + 1] = reset
    o = o + 1
  else
    out[o + 1], out[o + 2] = -reset - 1, used - base
    o = o + 2
  end
end
local b = 3
while b < #ARGV do
  local kind, n = tonumber(ARGV[b]), tonumber(ARGV[b + 1])
  local A, B, C = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local t = ARGV[b + 5]
  if t == '' then t = now else t = tonumber(t) end
  local step, log = STEP[kind], LOG[kind]
  -- The group's decision on an absent key, and the value and PX its SET
  -- NX GET writes when it admits.
  local rok, rrem, rretry, rreset, rused, rval, rpx
  if step then
    rok, rrem, rretry, rreset, rused, rval = step(false, t, n, A, B, C)
    if rval then rpx = px(rreset) end
  end
  -- denied[key] is the denial of key earlier in this group. A decision is
  -- a function of the key's state, the arguments and the time, all three
  -- the same for the rest of the group once a denial has left the state as
  -- it was: the key's later decisions in the group are that denial again,
  -- and cost Redis nothing (one hot key over its limit is the common case).
  -- A charge (kind 7 and after) counts its denial: it is never repeated.
  local denied
  local charge = kind > 6
  for _ = 1, tonumber(ARGV[b + 6]) do
    ki = ki + 1
    local key = KEYS[ki]
    local r = denied and denied[key]
    if r then
      emit(0, r[1], r[2], r[3], r[4])
    else
      local ok, rem, retry, reset, used
      if log then
        local last, same
        ok, rem, retry, reset, used, last, same = log[1](key, t, n, A, B, C, 0)
        if ok == 1 and n > 0 then log[2](key, used, n, A, B, C, last, same) end
      else
        local v
        if rval then
          v = redis.call('SET', key, rval, 'NX', 'GET', 'PX', rpx)
        else
          v = redis.call('GET', key)
        end
        if v then
          local val, keep
          ok, rem, retry, reset, used, val, keep = step(v, t, n, A, B, C)
          write(key, val, reset, keep)
        else
          ok, rem, retry, reset, used = rok, rrem, rretry, rreset, rused
        end
      end
      emit(ok, rem, retry, reset, used)
      if ok == 0 and not charge then
        denied = denied or {}
        denied[key] = {rem, retry, reset, used}
      end
    end
  end
  b = b + 7
end
return out
