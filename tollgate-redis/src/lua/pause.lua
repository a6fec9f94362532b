-- Pauses a key for the whole fleet until Redis time now + ARGV[1] microseconds; a pause that
-- already lasts longer is kept.
-- KEYS[1]: the key's "paused until".
-- ARGV[1]: the pause in microseconds, at most MAX_PAUSE (100 years: the caller clamps it),
-- so now + ARGV[1] stays a whole number a Lua number holds exactly (below 2^53) until the
-- year 2155, and the key's expiry in milliseconds is far inside what PX accepts.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local duration = tonumber(ARGV[1])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if now + duration > current then
  redis.call('SET', KEYS[1], string.format('%.0f', now + duration), 'PX', math.ceil(duration / 1000) + 1)
end
return 0
