-- Whether a key is paused, for limits with neither a cap nor a rate (the pause is all there
-- is to decide), on Redis's clock. Nothing is taken, so there is no warm-up to wait: a pause
-- Redis lost with its data is gone whatever the caller does.
-- KEYS[1]: the key's "paused until" (see rate.lua)
-- Returns {0, 0} when the key is not paused, {2, micros} while it is.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local paused = pause_left(KEYS[1], now)
if paused then
  return {2, wait_reply(paused)}
end
return {0, 0}
