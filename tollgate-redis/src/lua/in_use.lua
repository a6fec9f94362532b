-- Counts a key's live leases on Redis's clock.
-- KEYS[1]: the key's lease set.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
return redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%.0f', now), '+inf')
