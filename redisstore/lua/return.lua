-- return.lua: Leaser.Return, internal/algo's *Return math. ARGV = kind, n,
-- at µs, rate, period, cap, R, P, [now µs, test only].
local p = {rate = tonumber(ARGV[4]), period = tonumber(ARGV[5]), cap = tonumber(ARGV[6]),
  R = tonumber(ARGV[7]), P = tonumber(ARGV[8])}
ALG[tonumber(ARGV[1])].ret(KEYS[1], now_us(ARGV[9]), tonumber(ARGV[3]), tonumber(ARGV[2]), p)
return {1}
