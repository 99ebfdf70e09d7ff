-- batch.lua: the driver of the batch script, which runs the independent
-- decisions of concurrent callers in one script run so that the cost of
-- starting a script and of reading TIME is shared. Go puts before it every
-- flat script, each wrapped as DECIDE[kind] = function(KEYS, ARGV, ...)
-- <script> end, so that a batched decision runs the code of a single one
-- (with the batch's F as its ...), but for the at-rest SET NX GET of the
-- kinds that have one, which this driver makes with values it computes
-- once per group (REST below): most of a decision's cost in Redis is its
-- Lua, not its one call; and for a key's calls after its denial in a
-- group, which repeat that denial (denied, below). The rest_<algorithm>.lua
-- functions come first, shared by the flat scripts and the driver.
-- ARGV = TTL slack ms, then one group of 7 values per distinct set of
-- arguments: kind, n, up to three limit values ('' when unused), now µs
-- (test only, else ''), and how many of the following KEYS it decides.
-- Returns, after a base time (the first decision's), the decisions in KEYS
-- order, compact since the client parses every value: remaining, or
-- -(remaining+1) when denied, followed by the retry µs; then the reset µs
-- when the decision used the base time, else -(reset+1) and the time used
-- minus the base. An admission at the batch's time is two values.
local NP = {3, 3, 3, 4, 4, 4} -- ARGV of each flat script before its now
-- F is the flat scripts' F('%d', x) (their only use of it): each integer is
-- formatted once per batch, since string.format costs as much as a fifth
-- of a decision and the decisions of a batch share now and their TTLs.
local FMT = {}
local function F(_, x)
  local s = FMT[x]
  if not s then
    s = string.format('%d', x)
    FMT[x] = s
  end
  return s
end
-- REST[kind](a) is the at-rest admission (rest_<algorithm>.lua, which the
-- flat script calls too) for a decision with the arguments a (as a flat
-- script gets them), for the kinds that have one: the driver makes its SET
-- NX GET with values computed once per group. A key found goes to the flat
-- script with its value (V), so that it is not read twice.
local REST = {}
REST[1] = function(a) return rest_fixed_window(a[1], a[2], a[3], a[4], a[5], F) end
REST[3] = function(a) return rest_sliding_window(a[1], a[2], a[3], a[4], a[5], F) end
REST[4] = function(a) return rest_gcra(a[1], a[2], a[3], a[4], a[5], a[6], F) end
REST[5] = REST[4]
local slack = tonumber(ARGV[1])
local now
local out, o, ki = {0}, 1, 0
local base
-- One KEYS and one ARGV table serve every decision: a flat script reads
-- only its own np+2 values and keeps neither table.
local k, a = {}, {}
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
local b = 1
while b < #ARGV do
  local kind = tonumber(ARGV[b + 1])
  local np = NP[kind]
  local t = ARGV[b + 6]
  if t == '' then
    if not now then
      local x = redis.call('TIME')
      now = x[1] * 1000000 + x[2]
    end
    t = now
  else
    t = tonumber(t)
  end
  a[1], a[2], a[3] = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  if np == 4 then a[4] = tonumber(ARGV[b + 5]) end
  a[np + 1] = t
  a[np + 2] = slack
  local f = DECIDE[kind]
  local rs, px, rrem, rreset
  if REST[kind] then rs, px, rrem, rreset = REST[kind](a) end
  -- denied[key] is the denial of key earlier in this group. A decision is
  -- a function of the key's state, the arguments and the time, all three
  -- the same for the rest of the group once a denial has left the state as
  -- it was: the key's later decisions in the group are that denial again,
  -- and cost Redis nothing (one hot key over its limit is the common case).
  local denied
  for _ = 1, tonumber(ARGV[b + 7]) do
    ki = ki + 1
    local key = KEYS[ki]
    local r = denied and denied[key]
    if r then
      emit(0, r[2], r[3], r[4], r[5])
    else
      local v
      if rs then v = redis.call('SET', key, rs, 'NX', 'GET', 'PX', px) end
      if rs and not v then
        emit(1, rrem, 0, rreset, t)
      else
        k[1] = key
        r = f(k, a, F, v)
        emit(r[1], r[2], r[3], r[4], r[5])
        if r[1] == 0 then
          denied = denied or {}
          denied[key] = r
        end
      end
    end
  end
  b = b + 7
end
return out
