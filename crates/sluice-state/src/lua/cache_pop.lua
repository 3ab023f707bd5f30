-- Take up to ARGV[1] members off an index (a purge's next batch), returning them.
--
-- KEYS[1]  the index
local members = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #members > 0 then
  redis.call('ZREM', KEYS[1], unpack(members))
end
return members
