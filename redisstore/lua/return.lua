-- return.lua: the driver of Leaser.Return (internal/algo's *Return math),
-- after the prologue and every algorithm's file: the algorithm's return
-- function gives back n units taken at at. ARGV = now µs or '' (Redis
-- TIME), TTL slack ms, kind, n, the limit's values (A, B, C; '' when
-- unused), at µs ('': now, a refund whose admission time is unknown).
-- The kinds of limits that count every hit (7 and after) return as their
-- algorithm's.
local RETURN = {fw_return, sl_return, sw_return, gcra_return, gcra_return, ms_return, fw_return, false, sw_return, gcra_return, gcra_return}
local A, B, C = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local at = ARGV[8]
if at == '' then at = false else at = tonumber(at) end
RETURN[tonumber(ARGV[3])](KEYS[1], now, at, tonumber(ARGV[4]), A, B, C)
return {1}
