-- Admission: every check passes and is taken, or nothing is taken. Mirrors src/gcra.rs and
-- the in-memory backend (src/memory.rs); keep them in step.
--
-- KEYS[i]  the counter of check i
-- ARGV[1]  '1': read only (admin quotas), '0': admit
-- ARGV[2]  the lease member ('' when there is no concurrency check)
-- ARGV[3]  the lease TTL, ms
-- then per check, 4 values: kind ('g' GCRA, 'c' concurrency, 'b' budget), limit,
--          period (µs; unused for 'c'), cost (GCRA units; unused otherwise)
--
-- Returns {refused index (0: admitted), reason (0 limited, 1 too large, 2 budget),
--          retry µs (-1: never), then per check: limit, remaining, used, reset µs}
local EPS = 1.0
local BASE = 1700000000
local t = redis.call('TIME')
local sec, usec = tonumber(t[1]), tonumber(t[2])
local now = (sec - BASE) * 1000000 + usec
local unix = sec * 1000000 + usec
local now_ms = sec * 1000 + math.floor(usec / 1000)
local dry = ARGV[1] == '1'
local member = ARGV[2]
local lease_ttl = tonumber(ARGV[3])

local function numbers(limit, period, interval, tat)
  local backlog = math.max(tat - now, 0)
  local tol = math.min(EPS / interval, 0.5)
  local remaining = math.max(math.floor((period - backlog) / interval + tol), 0)
  if remaining > limit then remaining = limit end
  local used = math.max(math.ceil(backlog / interval - tol), 0)
  return remaining, used, backlog
end

local out = {0, 0, -1}
local writes = {}
-- Per check: the numbers as they stand (reads, refusals) and after this admission.
local standing, after = {}, {}
for i = 1, #KEYS do
  local a = 3 + (i - 1) * 4
  local kind = ARGV[a + 1]
  local limit = tonumber(ARGV[a + 2])
  local period = tonumber(ARGV[a + 3])
  local cost = tonumber(ARGV[a + 4])
  local refused, reason, retry = false, 0, -1
  if kind == 'g' then
    local interval = period / limit
    local tat = tonumber(redis.call('GET', KEYS[i])) or now
    local remaining, used, reset = numbers(limit, period, interval, tat)
    standing[i] = {limit, remaining, used, reset}
    after[i] = standing[i]
    if cost > limit then
      refused, reason = true, 1
    else
      local new_tat = math.max(tat, now) + cost * interval
      local wait = new_tat - period - now
      if wait > EPS then
        refused, retry = true, wait
      else
        remaining, used, reset = numbers(limit, period, interval, new_tat)
        after[i] = {limit, remaining, used, reset}
        if cost > 0 then writes[i] = new_tat end
      end
    end
  elseif kind == 'c' then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now_ms)
    local n = redis.call('ZCARD', KEYS[i])
    standing[i] = {limit, math.max(limit - n, 0), n, 0}
    after[i] = standing[i]
    if n >= limit then
      refused, retry = true, 1000000
    else
      after[i] = {limit, limit - n - 1, n + 1, 0}
      writes[i] = true
    end
  elseif kind == 'b' then
    local window = math.floor(unix / period)
    local h = redis.call('HMGET', KEYS[i], 'w', 's')
    local spend = 0
    if tonumber(h[1]) == window then spend = tonumber(h[2]) or 0 end
    local reset = (window + 1) * period - unix
    standing[i] = {limit, math.max(limit - spend, 0), spend, reset}
    after[i] = standing[i]
    if spend >= limit then refused, reason, retry = true, 2, reset end
  else
    return redis.error_reply('unknown check kind')
  end
  if refused and out[1] == 0 then
    out[1], out[2], out[3] = i, reason, math.ceil(retry)
  end
end

local report = after
if dry or out[1] ~= 0 then report = standing end
for i = 1, #KEYS do
  local q = report[i]
  out[#out + 1] = q[1]
  out[#out + 1] = q[2]
  out[#out + 1] = q[3]
  out[#out + 1] = math.ceil(q[4])
end

if out[1] == 0 and not dry then
  for i = 1, #KEYS do
    local w = writes[i]
    if w then
      local kind = ARGV[3 + (i - 1) * 4 + 1]
      if kind == 'g' then
        redis.call('SET', KEYS[i], string.format('%.17g', w), 'PX',
          string.format('%.0f', math.ceil((w - now) / 1000) + 1000))
      else
        redis.call('ZADD', KEYS[i], string.format('%.0f', now_ms + lease_ttl), member)
        redis.call('PEXPIRE', KEYS[i], lease_ttl * 2)
      end
    end
  end
end
return out
