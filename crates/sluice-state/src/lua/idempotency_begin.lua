-- Begin an idempotent request.
--
-- KEYS[1]  the record
-- ARGV[1]  the body hash, ARGV[2] the owner token, ARGV[3] the in-flight TTL ms
--
-- Returns {'fresh'} | {'inflight'} | {'mismatch'} | {'done', status, headers, body}
local r = redis.call('HMGET', KEYS[1], 'st', 'h', 'code', 'hd', 'b')
if not r[1] then
  redis.call('HSET', KEYS[1], 'st', 'f', 'h', ARGV[1], 'tok', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'fresh'}
end
if r[2] ~= ARGV[1] then return {'mismatch'} end
if r[1] == 'f' then return {'inflight'} end
return {'done', r[3], r[4] or '', r[5] or ''}
