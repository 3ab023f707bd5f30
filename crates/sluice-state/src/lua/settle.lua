-- Settle: reconcile token reservations, release leases, add spend. Mirrors src/memory.rs.
-- One call may carry the updates of many requests (queued settles are sent as one batch); a
-- key may then appear more than once, and its updates apply in order.
--
-- KEYS[i]  a counter to update
-- per key, 4 values: kind ('g' GCRA, 'c' lease, 'b' budget), limit (budget: its window,
--          0 for the current one), period µs, amount (GCRA: signed units to charge; budget:
--          spend to add; 'c': the lease member to remove)
local EPS = 1.0
local BASE = 1700000000
local t = redis.call('TIME')
local sec, usec = tonumber(t[1]), tonumber(t[2])
local now = (sec - BASE) * 1000000 + usec
local unix = sec * 1000000 + usec
for i = 1, #KEYS do
  local a = (i - 1) * 4
  local kind = ARGV[a + 1]
  if kind == 'g' then
    local limit, period, delta = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    local tat = tonumber(redis.call('GET', KEYS[i])) or now
    local new_tat = math.max(tat, now) + delta * (period / limit)
    if new_tat > now then
      redis.call('SET', KEYS[i], string.format('%.17g', new_tat), 'PX',
        string.format('%.0f', math.ceil((new_tat - now) / 1000) + 1000))
    else
      redis.call('DEL', KEYS[i])
    end
  elseif kind == 'c' then
    redis.call('ZREM', KEYS[i], ARGV[a + 4])
  elseif kind == 'b' then
    -- The limit slot holds the window the spend belongs to (0: the current one); spend owed
    -- from an outage for a period that has ended is dropped.
    local period = tonumber(ARGV[a + 3])
    local current = math.floor(unix / period)
    local expected = tonumber(ARGV[a + 2])
    if expected == 0 or expected == current then
      local window = string.format('%.0f', current)
      if redis.call('HGET', KEYS[i], 'w') == window then
        redis.call('HINCRBY', KEYS[i], 's', ARGV[a + 4])
      else
        redis.call('HSET', KEYS[i], 'w', window, 's', ARGV[a + 4])
      end
      local ends = (current + 1) * period
      redis.call('PEXPIRE', KEYS[i], string.format('%.0f', math.ceil((ends - unix) / 1000) + 60000))
    end
  else
    return redis.error_reply('unknown settle kind')
  end
end
return #KEYS
