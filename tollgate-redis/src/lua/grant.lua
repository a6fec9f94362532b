-- Grants one lease of a key if the key is not paused and has room (and, with a rate, if the
-- key's rate allows a start: both are decided and taken together), on Redis's clock.
-- KEYS[1]: the key's lease set (member = lease id, score = expiry in Redis TIME microseconds)
-- KEYS[2]: the namespace's epoch (see epoch.lua)
-- KEYS[3]: this lease id's tombstone (present when its caller gave up before the reply)
-- KEYS[4]: the key's "paused until" (see rate.lua): checked whatever limits the key has
-- KEYS[5]: the key's TAT (see rate.lua), with a rate only
-- ARGV[1]: the limit, ARGV[2]: the lease TTL in microseconds, ARGV[3]: the lease id,
-- ARGV[4]: the run id of the Redis as the caller last read it (see epoch.lua),
-- ARGV[5], ARGV[6]: the rate's interval and burst tolerance in microseconds (0: no rate)
-- Returns {0, expiry} when granted, {1, micros until the oldest lease lapses} when the key is
-- full, {2, micros} while the key is paused, {3, micros left} while the store warms up after
-- Redis lost its data, {4, 0} when the grant was cancelled before it ran, {5, micros} when
-- the rate allows no start yet. Waits are capped by wait_reply (see rate.lua).
-- Times are microseconds since the Unix epoch as Lua numbers (doubles): exact below 2^53,
-- that is until the year 2255. Numbers written back go through string.format('%.0f') or
-- Redis's own %.17g conversion, both exact for these integers.
-- The set disappears on its own 1 s after its last lease lapses. From the highest score, not
-- the caller's TTL: a process with a short TTL must not cut short a longer lease's set.
local function expire_after_last(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', key, math.ceil(tonumber(last[2]) / 1000) + 1000)
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[2])
-- The caller gave up (its cancel travels on another connection and can arrive first): adding
-- the lease now would leave it without an owner for a TTL.
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {4, 0}
end
local since = epoch_since(KEYS[2], ARGV[4], now)
if now < since + ttl then
  return {3, wait_reply(since + ttl - now)}
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
-- The same id asked again (a call resent after its reply was lost, when the first send ran):
-- the lease is this caller's already; counting it against the limit would answer "full" and
-- leave it orphaned. Renew it and say granted.
if redis.call('ZSCORE', KEYS[1], ARGV[3]) then
  redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[3])
  expire_after_last(KEYS[1])
  return {0, now + ttl}
end
-- A paused key is granted nothing, whatever limits it has.
local paused = pause_left(KEYS[4], now)
if paused then
  return {2, wait_reply(paused)}
end
local interval = tonumber(ARGV[5] or '0')
local rate = nil
if interval > 0 then
  rate = rate_check(KEYS[5], interval, tonumber(ARGV[6]), since, now)
  if rate[1] ~= 0 then
    return {5, rate[2]}
  end
end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {1, wait_reply(tonumber(oldest[2]) - now)}
end
if rate then
  rate_take(KEYS[5], rate[2], now)
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[3])
expire_after_last(KEYS[1])
return {0, now + ttl}
