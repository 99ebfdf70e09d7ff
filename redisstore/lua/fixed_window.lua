-- fixed_window.lua: the fixed window, internal/algo.FixedWindowStep
-- (fw_step), FixedWindowCharge (fw_charge) and FixedWindowReturn
-- (fw_return). The value is one integer,
-- start + count, when count < period (start is a multiple of period, so it
-- decodes exactly), and "start:count" otherwise.

-- fw_state decodes a value: the window's start, its count, and whether it
-- was one integer.
local function fw_state(v, per)
  if not v then return 0, 0, false end
  local a, b = split(v)
  if b then return a, b, false end
  local count = a % per
  return a - count, count, true
end

local function fw_val(start, count, per)
  if count < per then return F('%d', start + count) end
  return string.format('%d:%d', start, count)
end

-- fw_at is the state at now (internal/algo's Window.at): now itself
-- (never before the state's start: time does not go backwards for a key),
-- the start ws of now's window and its count c, and whether the value was
-- one integer.
local function fw_at(v, now, per)
  local start, count, packed = fw_state(v, per)
  if count > 0 and now < start then now = start end
  local ws = now - now % per
  if count > 0 and start == ws then return now, ws, count, packed end
  return now, ws, 0, packed
end

-- fw_step decides n at now on the value v (false: the key is absent) under
-- rate per period µs, as every counter's step does (single.lua): it
-- returns allowed (0/1), remaining, retry µs, reset µs, the time used, and
-- when it admits n > 0 the value to write and whether the key keeps its
-- TTL (it already expires when the new value stops mattering): here n
-- itself, since the key then holds the integer start + count and INCRBY n
-- writes the new value.
local function fw_step(v, now, n, rate, per)
  local ws, c, packed
  now, ws, c, packed = fw_at(v, now, per)
  local e = ws + per - now
  if n > 0 and c + n > rate then return 0, math.max(rate - c, 0), e, e, now end
  if n == 0 then
    local reset = 0
    if c > 0 then reset = e end
    return 1, math.max(rate - c, 0), 0, reset, now
  end
  local keep = packed and c > 0
  c = c + n
  local s = fw_val(ws, c, per)
  return 1, rate - c, 0, e, now, s, keep and c < per and n
end

-- fw_charge is fw_step for a limit that counts every hit: n is counted,
-- up to MAX_COUNT_DEBT (internal/algo.MaxCountDebt), whatever the
-- decision, which denies a cost of 0 too while the count is above rate.
local function fw_charge(v, now, n, rate, per)
  local ws, c, packed
  now, ws, c, packed = fw_at(v, now, per)
  local e = ws + per - now
  local c2 = math.min(c + n, MAX_COUNT_DEBT)
  local ok, retry, reset = 1, 0, 0
  if c + n > rate then ok, retry = 0, e end
  if c2 > 0 then reset = e end
  if n == 0 then return ok, math.max(rate - c2, 0), retry, reset, now end
  local keep = packed and c > 0
  local s = fw_val(ws, c2, per)
  return ok, math.max(rate - c2, 0), retry, e, now, s, keep and c2 < per and c2 - c
end

-- fw_return gives back n units taken at at (false: now, as a decision
-- would use it): they leave the count when the key still holds at's
-- window.
local function fw_return(key, now, at, n, _, per)
  local v = redis.call('GET', key)
  local start, count = fw_state(v, per)
  at = at or math.max(now, start)
  if count > 0 and at - at % per == start then
    redis.call('SET', key, fw_val(start, math.max(count - n, 0), per), 'KEEPTTL')
  end
end
