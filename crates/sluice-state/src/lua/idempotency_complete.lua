-- Store the response of an in-flight record this owner still holds.
--
-- KEYS[1]  the record
-- ARGV[1]  the owner token, ARGV[2] status, ARGV[3] headers, ARGV[4] body, ARGV[5] TTL ms
--
-- Returns 1 if stored, 0 if the record was gone or taken over.
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'st', 'd', 'code', ARGV[2], 'hd', ARGV[3], 'b', ARGV[4])
redis.call('HDEL', KEYS[1], 'tok')
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
