-- grant.lua: the driver of Granter.Grant (internal/algo.GrantStep), after
-- the prologue and the counter algorithms' files: one holder's request
-- updates the key's holder table and takes the units it is granted with
-- its algorithm's step, atomically.
-- KEYS[1] = state, KEYS[2] = holder table (a hash: holder -> its row).
-- ARGV = now µs or '' (Redis TIME), TTL slack ms, kind, N, the limit's
-- values (A, B, C; '' when unused), holder, demand, allowance, TTL µs,
-- not-after µs ('' for none), pool (Rate), period µs, spent window µs ('' for
-- none), spent, the most holders, the share TTL µs.
-- Returns {code, units, at, share, allowance, taken, holders, window,
-- remaining, retry, reset}: code 1 applied, 2 stale (arrived after its
-- not-after: nothing applied), 3 a new holder beyond the most.
--
-- A row is "seq:demand:allowance:until:win:taken:seen" (GrantStep's
-- Holder).
-- Only the requesting holder's row is written (and the expired rows
-- deleted): a row of another window than the current one took nothing in
-- this one.
local STEP = {fw_step, false, sw_step, gcra_step, gcra_step}
local SHARE_TTL = tonumber(ARGV[18])
local key, tkey = KEYS[1], KEYS[2]
local kind, N = tonumber(ARGV[3]), tonumber(ARGV[4])
local A, B, C = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local holder = ARGV[8]
local demand, allow, ttl = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local notAfter = ARGV[12]
local pool, per = tonumber(ARGV[13]), tonumber(ARGV[14])
local spentWin, spent, most = ARGV[15], tonumber(ARGV[16]), tonumber(ARGV[17])

if notAfter ~= '' and now > tonumber(notAfter) then
  return {2, 0, now, 0, 0, 0, 0, 0, 0, 0, 0}
end
local ws = now - now % per

-- The live rows, in order of arrival; the expired ones' names.
local rows, dead, maxSeq = {}, {}, 0
local flat = redis.call('HGETALL', tkey)
for i = 1, #flat, 2 do
  local v = flat[i + 1]
  local f, j = {}, 1
  for p in string.gmatch(v, '[^:]+') do
    f[j] = tonumber(p)
    j = j + 1
  end
  if f[4] <= now then
    dead[#dead + 1] = flat[i]
  else
    local r = {name = flat[i], seq = f[1], d = f[2], a = f[3], u = f[4], w = f[5], t = f[6], s = f[7]}
    if r.seq > maxSeq then maxSeq = r.seq end
    rows[#rows + 1] = r
  end
end
table.sort(rows, function(x, y) return x.seq < y.seq end)
local gi
for i = 1, #rows do
  if rows[i].name == holder then gi = i end
end
if not gi then
  if #rows >= most then return {3, 0, now, 0, 0, 0, #rows, ws, 0, 0, 0} end
  rows[#rows + 1] = {name = holder, seq = maxSeq + 1, d = 0, a = 0, u = 0, w = ws, t = 0, s = 0}
  gi = #rows
end
local g = rows[gi]
if g.w ~= ws then g.w, g.t = ws, 0 end
g.d, g.u, g.s = demand, now + ttl, now
if spent > 0 and spentWin ~= '' and tonumber(spentWin) == ws then
  g.t = math.min(g.t + spent, pool)
end
local others = 0
for i = 1, #rows do
  if i ~= gi then
    local t = 0
    if rows[i].w == ws then t = rows[i].t end
    others = others + math.max(t, rows[i].a)
  end
end
if allow <= g.a then
  g.a = allow
else
  g.a = math.max(g.a, math.min(allow, pool - others))
end

-- The fair share (internal/algo.FairShares) among the holders heard from
-- within the share TTL: demand and an equal part of the spare when the
-- demands fit, else water-filling by (demand, arrival).
local share
do
  local act, si = {}, 0
  for i = 1, #rows do
    if i == gi or now - rows[i].s <= SHARE_TTL then
      act[#act + 1] = rows[i]
      if i == gi then si = #act end
    end
  end
  local rows = act
  local n, sum, out = #rows, 0, {}
  for i = 1, n do sum = sum + rows[i].d end
  if sum <= pool then
    local spare = pool - sum
    local each = floor(spare / n)
    local extra = spare - each * n
    for i = 1, n do
      out[i] = rows[i].d + each
      if i <= extra then out[i] = out[i] + 1 end
    end
  else
    local order = {}
    for i = 1, n do order[i] = i end
    table.sort(order, function(x, y)
      local dx, dy = rows[x].d, rows[y].d
      return dx < dy or (dx == dy and x < y)
    end)
    local rem, left = pool, n
    for j = 1, n do
      local i = order[j]
      local lvl = floor(rem / left)
      if rows[i].d <= lvl then
        out[i] = rows[i].d
        rem = rem - rows[i].d
        left = left - 1
      else
        local extra = rem - lvl * left
        for m = j, n do
          out[order[m]] = lvl
          if m - j < extra then out[order[m]] = lvl + 1 end
        end
        break
      end
    end
  end
  share = out[si]
end

-- The algorithm's free units, then the grant, admitted by its step.
local step = STEP[kind]
local v = redis.call('GET', key)
local _, free, retry, reset, at = step(v, now, 0, A, B, C)
at = now
local k = math.max(0, math.min(N, math.max(share, g.a) - g.t, pool - others - g.t, free))
local rem = free
if k > 0 then
  local ok, r2, _, rs2, used, val = step(v, now, k, A, B, C)
  if ok ~= 1 then return redis.error_reply('grant: the step denied units it said were free') end
  redis.call('SET', key, val, 'PX', px(rs2))
  rem, reset, at, retry = r2, rs2, used, 0
  g.t = g.t + k
elseif free == 0 and N > 0 then
  local _, r1, rt1, rs1 = step(v, now, 1, A, B, C)
  rem, retry, reset = r1, rt1, rs1
else
  retry = 0
  if N > 0 then retry = per - (now - ws) end
end

if #dead > 0 then redis.call('HDEL', tkey, unpack(dead)) end
redis.call('HSET', tkey, holder, string.format('%d:%d:%d:%d:%d:%d:%d', g.seq, g.d, g.a, g.u, g.w, g.t, g.s))
local last = 0
for i = 1, #rows do
  if rows[i].u > last then last = rows[i].u end
end
redis.call('PEXPIRE', tkey, px(last - now))
return {1, k, at, share, g.a, g.t, #rows, ws, rem, retry, reset}
