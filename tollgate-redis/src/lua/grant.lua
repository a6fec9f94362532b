-- Grants one lease of a key if the key has room, on Redis's clock.
-- KEYS[1]: the key's lease set (member = lease id, score = expiry in Redis TIME microseconds)
-- KEYS[2]: the namespace's epoch key (the Redis time from which grants are safe)
-- ARGV[1]: the limit, ARGV[2]: the lease TTL in microseconds, ARGV[3]: the lease id
-- Returns {0, expiry} when granted, {1, micros until the oldest lease lapses} when the key is
-- full, {3, micros left} while the store warms up after Redis lost its data.
-- Times are microseconds since the Unix epoch as Lua numbers (doubles): exact below 2^53,
-- that is until the year 2255. Numbers written back go through string.format('%.0f') or
-- Redis's own %.17g conversion, both exact for these integers.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[2])
-- An absent epoch means this Redis has never seen us or has lost its data (a restart without
-- persistence, a flush): leases granted before may still be held, so nothing is granted until
-- they have lapsed.
local ready = redis.call('GET', KEYS[2])
if not ready then
  redis.call('SET', KEYS[2], string.format('%.0f', now + ttl))
  return {3, ttl}
end
ready = tonumber(ready)
if now < ready then
  return {3, ready - now}
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {1, tonumber(oldest[2]) - now}
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[3])
-- The set disappears on its own once every lease in it has lapsed.
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000) + 1000)
return {0, now + ttl}
