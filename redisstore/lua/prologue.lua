-- prologue.lua: the start of every script (scripts.go). Before it, the
-- script's first lines set TA, the index in ARGV of the test clock's time,
-- and internal/algo's constants under their Go names: MAX_EXACT (2^53),
-- MAX_COUNT_DEBT, MAX_BUCKET_DEBT, LOG_RETURN_DEPTH (and redisstore's
-- MAX_MILLISECOND_UNITS).
--
-- Every number is an integer below 2^53 (internal/algo.CheckBounds), so
-- doubles are exact and floor(a / b) is the integer quotient. Integers go
-- to redis.call through F('%d', x): a number would be written by Redis with
-- %.17g, exact below 2^53 but several times slower, and tostring writes
-- 1e+15. F is string.format; the batch script replaces it with a function
-- that formats each integer once for all its decisions (they share now, and
-- often their values), so F takes only '%d'.
local floor, F = math.floor, string.format

-- now is Redis's TIME in µs, or ARGV[TA] when a test clock sent its time
-- (not ''); slack (ms, ARGV[TA + 1], test only) lengthens every TTL, so
-- that keys outlive a test clock that stands still.
local now, slack = ARGV[TA], tonumber(ARGV[TA + 1]) or 0
if now and now ~= '' then
  now = tonumber(now)
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

-- px is the PX (ms, formatted) of a state that matters for reset µs.
local function px(reset) return F('%d', floor((reset + 999) / 1000) + slack) end

-- split returns the ':'-separated integers of a stored value.
local function split(v)
  local i = string.find(v, ':', 1, true)
  if not i then return tonumber(v) end
  local j = string.find(v, ':', i + 1, true)
  if not j then return tonumber(string.sub(v, 1, i - 1)), tonumber(string.sub(v, i + 1)) end
  return tonumber(string.sub(v, 1, i - 1)), tonumber(string.sub(v, i + 1, j - 1)), tonumber(string.sub(v, j + 1))
end

-- write writes the value val that a counter's step (single.lua) admitted,
-- if any: with the TTL the key has (keep: true, or a number k when the key
-- holds an integer that INCRBY k makes val), or one of reset µs.
local function write(key, val, reset, keep)
  if keep == true then
    redis.call('SET', key, val, 'KEEPTTL')
  elseif keep then
    redis.call('INCRBY', key, F('%d', keep))
  elseif val then
    local p = px(reset)
    redis.call('SET', key, val, 'PX', p)
  end
end
