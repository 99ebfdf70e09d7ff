-- batch.lua: the driver of the batch script, which runs the independent
-- decisions of concurrent callers in one script run so that the cost of
-- starting a script and of reading TIME is shared. Go puts before it every
-- flat script, each wrapped as DECIDE[kind] = function(KEYS, ARGV) <script>
-- end, so that a batched decision runs exactly the code of a single one.
-- ARGV = TTL slack ms, then 6 values per key KEYS[i]: kind, n, up to three
-- limit values ('' when unused), [now µs, test only, or '']. Returns 5
-- values per decision: allowed, remaining, retry µs, reset µs, time used µs.
local NP = {3, 3, 3, 4, 4, 4} -- ARGV of each flat script before its now
local slack = tonumber(ARGV[1])
local now
local out = {}
-- The decisions of a batch mostly share their numbers (n, the limit's):
-- each distinct string is converted once and handed over as a number.
local NUM, k, a = {}, {}, {}
local function num(s)
  local v = NUM[s]
  if not v then
    v = tonumber(s)
    NUM[s] = v
  end
  return v
end
for i = 1, #KEYS do
  local b = 1 + (i - 1) * 6
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
  -- One KEYS and one ARGV table serve every decision: a flat script reads
  -- only its own np+2 values and keeps neither table.
  a[1], a[2], a[3] = num(ARGV[b + 2]), num(ARGV[b + 3]), num(ARGV[b + 4])
  if np == 4 then a[4] = num(ARGV[b + 5]) end
  a[np + 1] = t
  a[np + 2] = slack
  k[1] = KEYS[i]
  local r = DECIDE[kind](k, a)
  local o = (i - 1) * 5
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = r[1], r[2], r[3], r[4], r[5]
end
return out
