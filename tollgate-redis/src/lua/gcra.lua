-- Takes one start of a key's rate (GCRA) on Redis's clock, unless the key is paused.
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
  return {3, wait_reply(since + ttl - now)}
end
local paused = pause_left(KEYS[2], now)
if paused then
  return {2, wait_reply(paused)}
end
local rate = rate_check(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), since, now)
if rate[1] ~= 0 then
  return rate
end
rate_take(KEYS[1], rate[2], now)
return {0, 0}
