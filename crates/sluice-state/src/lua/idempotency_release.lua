-- Forget an in-flight record this owner still holds.
--
-- KEYS[1]  the record
-- ARGV[1]  the owner token
if redis.call('HGET', KEYS[1], 'tok') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
