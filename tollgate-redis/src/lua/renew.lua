-- Renews every lease one process holds, in one call, on Redis's clock.
-- KEYS: the lease sets; ARGV[1]: the lease TTL in microseconds, then for each key in order:
-- the number of its leases, then their ids.
-- Returns the ids that were no longer live (lapsed, or lost with Redis's data): their holders
-- are fenced, never renewed back to life.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[1])
local lost = {}
local a = 2
for _, key in ipairs(KEYS) do
  local n = tonumber(ARGV[a])
  a = a + 1
  for _ = 1, n do
    local id = ARGV[a]
    a = a + 1
    local expiry = redis.call('ZSCORE', key, id)
    if expiry and tonumber(expiry) > now then
      redis.call('ZADD', key, 'XX', now + ttl, id)
    else
      if expiry then
        redis.call('ZREM', key, id)
      end
      lost[#lost + 1] = id
    end
  end
  redis.call('PEXPIRE', key, math.ceil(ttl / 1000) + 1000)
end
return lost
