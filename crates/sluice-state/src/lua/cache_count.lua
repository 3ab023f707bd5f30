-- Live entries an index names.
--
-- KEYS[1]  the index (a sorted set of entry keys scored by expiry, Redis time ms)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
