-- Takes one start of a key's rate (GCRA) on Redis's clock.
-- KEYS[1]: the key's TAT (theoretical arrival time, Redis TIME microseconds)
-- KEYS[2]: the key's "paused until" (Redis TIME microseconds)
-- KEYS[3]: the namespace's epoch (see epoch.lua)
-- ARGV[1]: the interval in microseconds, ARGV[2]: the burst tolerance in microseconds
-- ((burst - 1) * interval), ARGV[3]: the lease TTL in microseconds (the warm-up), ARGV[4]:
-- the run id of the Redis as the caller last read it (see epoch.lua)
-- Returns {0, 0} when the start is taken, {1, micros} when the rate allows none yet,
-- {2, micros} while the key is paused, {3, micros} while the store warms up.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[3])
local since = epoch_since(KEYS[3], ARGV[4], now)
if now < since + ttl then
  return {3, since + ttl - now}
end
local paused = tonumber(redis.call('GET', KEYS[2]) or '0')
if paused > now then
  return {2, paused - now}
end
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat == 0 then
  -- No state: an idle key, or one whose TAT Redis lost with its data before `since`. A lost
  -- TAT was at most (start before the loss) + tolerance + interval, and that start was before
  -- `since`: so assume the worst, a start at `since`.
  tat = since + tolerance + interval
end
if tat < now then
  tat = now
end
local allowed_at = tat - tolerance
if allowed_at > now then
  return {1, allowed_at - now}
end
local next_tat = tat + interval
-- The state is only needed while it is ahead of now; an idle key's state disappears.
redis.call('SET', KEYS[1], string.format('%.0f', next_tat), 'PX', math.ceil((next_tat - now) / 1000) + 1)
return {0, 0}
