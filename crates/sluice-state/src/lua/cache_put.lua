-- Store a cached answer and/or index it for purges.
--
-- KEYS     with ARGV[1] == '1': KEYS[1] is the entry, the rest are indexes; else all indexes
--          (with Cluster the entry and each index may sit in different slots, so the store
--          sends one call per slot)
-- ARGV[1]  '1' if KEYS[1] is the entry, ARGV[2] TTL ms, ARGV[3] the entry's key (the index
--          member), ARGV[4] the envelope
--
-- An index is a sorted set of entry keys scored by expiry (Redis time, ms). Each store trims
-- what has expired and keeps the set alive as long as its longest-lived member, so an index
-- never holds more than the live entries it names, and goes when they do.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local first = 1
if ARGV[1] == '1' then
  redis.call('SET', KEYS[1], ARGV[4], 'PX', ttl)
  first = 2
end
for i = first, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  redis.call('ZADD', KEYS[i], now + ttl, ARGV[3])
  if redis.call('PTTL', KEYS[i]) < ttl then
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
end
return 1
