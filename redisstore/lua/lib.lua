-- lib.lua: helpers shared by every sluice script. Go concatenates this file,
-- the algorithm files a script needs and one driver (single.lua, multi.lua
-- or return.lua) into one script, loaded with EVALSHA.
--
-- Every number is an integer below 2^53 (internal/algo.CheckBounds), so
-- doubles are exact; divisions go through idiv, which corrects the rounding
-- of a / b, and numbers are written with %d, never tostring (1e+15).
local floor, fmt = math.floor, string.format

local function idiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

local function imod(a, b) return a - idiv(a, b) * b end
local function ceildiv(a, b) return idiv(a + b - 1, b) end
local function str(x) return fmt('%d', x) end

-- now_us is Redis's own time in µs, or the time a test injected.
local function now_us(v)
  if v and v ~= '' then return tonumber(v) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- ttl_ms turns a ResetAfter (µs) into a key's PX, plus the test slack.
local function ttl_ms(reset, slack) return ceildiv(reset, 1000) + slack end

-- split returns the ':'-separated integers of a stored value.
local function split(v)
  local i = string.find(v, ':', 1, true)
  if not i then return tonumber(v) end
  local j = string.find(v, ':', i + 1, true)
  if not j then return tonumber(string.sub(v, 1, i - 1)), tonumber(string.sub(v, i + 1)) end
  return tonumber(string.sub(v, 1, i - 1)), tonumber(string.sub(v, i + 1, j - 1)), tonumber(string.sub(v, j + 1))
end

-- ALG[kind] = {decide = f(key, now, n, p, st), commit = f(key, st, slack),
-- ret = f(key, now, at, n, p)}, kinds numbered as sluice.Algorithm (6 is the
-- sliding log in the millisecond layout). decide never writes and never
-- changes st; it returns the state after admitting n (st itself when
-- denied), allowed (0/1), remaining, retry, reset and the time it used.
local ALG = {}

-- bucket_decide is the decision shared by token bucket and GCRA, from the
-- scaled deficit d (d >= 0; above cap*P only when the limit was lowered).
-- A peek (n = 0) is always allowed.
-- bucket_credit is internal/algo.bucketCredit: what n bucket units taken at
-- at are still worth at now, in scaled units (n*P less the refill since).
local function bucket_credit(at, now, n, p)
  local full = n * p.P
  local el = now - at
  if el <= 0 then return full end
  if el >= ceildiv(full, p.R) then return 0 end
  return full - el * p.R
end

local function bucket_decide(d, p, n)
  local full = p.cap * p.P
  local d2 = d + n * p.P
  if n > 0 and d2 > full then
    return d, 0, idiv(math.max(full - d, 0), p.P), ceildiv(d2 - full, p.R), ceildiv(d, p.R)
  end
  return d2, 1, idiv(math.max(full - d2, 0), p.P), 0, ceildiv(d2, p.R)
end
