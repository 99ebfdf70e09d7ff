-- read_state.lua: how a flat script with an at-rest admission
-- (rest_<algorithm>.lua) reads its key. V is the value that a batch's SET
-- NX GET found (batch.lua). Otherwise, when the decision allows an absent
-- key's admission (s and px from the rest function), SET NX GET writes it
-- in one call, and on a key that exists writes nothing and returns the
-- value; otherwise GET reads it. Returns the value, or false when the key
-- was absent (and s written, when given).
local function read_state(key, V, s, px)
  if V then return V end
  if s then return redis.call('SET', key, s, 'NX', 'GET', 'PX', px) end
  return redis.call('GET', key)
end
