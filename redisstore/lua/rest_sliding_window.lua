-- rest_sliding_window.lua: the admission of n on an absent key (at rest)
-- by sliding_window.lua, internal/algo.SlidingWindowStep from the zero
-- state. For 0 < n <= rate, it returns the value and the PX that the
-- admission writes, and its remaining and reset µs; otherwise nil.
-- sliding_window.lua writes them with SET NX GET, and batch.lua once per
-- group of equal arguments. F is sliding_window.lua's F.
local function rest_sliding_window(n, rate, P, now, slack, F)
  if not (n > 0 and n <= rate) then return nil end
  local ws = now - now % P
  local reset = ws + 2 * P - now
  return string.format('%d:0:%d', ws, n), F('%d', math.floor((reset + 999) / 1000) + slack), rate - n, reset
end
