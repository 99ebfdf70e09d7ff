-- batch.lua: the driver of the batch script, which runs the independent
-- decisions of concurrent callers in one script run so that the cost of
-- starting a script and of reading TIME is shared. Go puts before it every
-- flat script, each wrapped as DECIDE[kind] = function(KEYS, ARGV, ...)
-- <script> end, so that a batched decision runs exactly the code of a
-- single one (with the batch's F as its ...).
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
local slack = tonumber(ARGV[1])
local now
local out, o, ki = {0}, 1, 0
local base
-- One KEYS and one ARGV table serve every decision: a flat script reads
-- only its own np+2 values and keeps neither table.
local k, a = {}, {}
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
  for _ = 1, tonumber(ARGV[b + 7]) do
    ki = ki + 1
    k[1] = KEYS[ki]
    local r = f(k, a, F)
    if not base then
      base = r[5]
      out[1] = base
    end
    if r[1] == 1 then
      out[o + 1] = r[2]
      o = o + 1
    else
      out[o + 1], out[o + 2] = -r[2] - 1, r[3]
      o = o + 2
    end
    if r[5] == base then
      out[o + 1] = r[4]
      o = o + 1
    else
      out[o + 1], out[o + 2] = -r[4] - 1, r[5] - base
      o = o + 2
    end
  end
  b = b + 7
end
return out
