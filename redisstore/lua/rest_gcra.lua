-- rest_gcra.lua: the admission of n on an absent key (at rest) by
-- gcra.lua, internal/algo.GCRAStep from the zero state. For n > 0 with
-- n*P <= cap*P (full), it returns the value and the PX that the admission
-- writes, and its remaining and reset µs; otherwise nil. gcra.lua writes
-- them with SET NX GET, and batch.lua once per group of equal arguments.
-- F is gcra.lua's F.
local function rest_gcra(n, full, P, R, now, slack, F)
  if not (n > 0 and n * P <= full) then return nil end
  local d2 = n * P
  local q = math.floor(d2 / R)
  local at, frac = now + q, d2 - q * R
  if at == 0 and frac == 0 then at, frac = -1, R end
  local s
  if frac == 0 then s = F('%d', at) else s = string.format('%d:%d', at, frac) end
  local reset = math.floor((d2 + R - 1) / R)
  return s, F('%d', math.floor((reset + 999) / 1000) + slack), math.floor(math.max(full - d2, 0) / P), reset
end
