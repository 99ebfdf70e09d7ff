-- rest_fixed_window.lua: the admission of n on an absent key (at rest) by
-- fixed_window.lua, internal/algo.FixedWindowStep from the zero state. For
-- 0 < n <= rate, it returns the value and the PX that the admission
-- writes, and its remaining and reset µs; otherwise nil. fixed_window.lua
-- writes them with SET NX GET, and batch.lua once per group of equal
-- arguments. F is fixed_window.lua's F.
local function rest_fixed_window(n, rate, per, now, slack, F)
  if not (n > 0 and n <= rate) then return nil end
  local ws = now - now % per
  local e = ws + per - now
  local s
  if n < per then s = F('%d', ws + n) else s = string.format('%d:%d', ws, n) end
  return s, F('%d', math.floor((e + 999) / 1000) + slack), rate - n, e
end
