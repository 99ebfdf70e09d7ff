-- reset.lua: the driver of Resetter.Reset. KEYS[1] = the state of one key
-- under one algorithm and period (every algorithm keeps its state in that
-- one key, so deleting it leaves the key untouched). Returns {1} when a
-- state was deleted, {0} when there was none.
return {redis.call('DEL', KEYS[1])}
