-- Renew live concurrency leases, in one batch.
--
-- KEYS[i]    a lease set
-- ARGV[1]    the lease TTL, ms
-- ARGV[1+i]  the member in KEYS[i] to renew
--
-- Returns how many were already gone (expired: their slot may have been taken).
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local lost = 0
for i = 1, #KEYS do
  local member = ARGV[i + 1]
  local score = tonumber(redis.call('ZSCORE', KEYS[i], member))
  if score and score > now_ms then
    redis.call('ZADD', KEYS[i], 'XX', string.format('%.0f', now_ms + ttl), member)
    redis.call('PEXPIRE', KEYS[i], ttl * 2)
  else
    if score then redis.call('ZREM', KEYS[i], member) end
    lost = lost + 1
  end
end
return lost
