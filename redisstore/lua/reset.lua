-- reset.lua: the driver of Resetter.Reset. KEYS[1] = the state of one key
-- under one algorithm and period (every algorithm keeps its state in that
-- one key, so deleting it leaves the key untouched). Returns {1} when a
-- state was deleted, {0} when there was none. UNLINK: a large sliding log
-- (thousands of entries) is freed in the background, where a DEL would
-- block Redis for as long as its freeing takes.
return {redis.call('UNLINK', KEYS[1])}
