-- Renews every lease one process holds, in one call, on Redis's clock.
-- KEYS: the lease sets; ARGV[1]: the lease TTL in microseconds, then for each key in order:
-- the number of its leases, then their ids.
-- Returns the ids that were no longer live (lapsed, or lost with Redis's data): their holders
-- are fenced, never renewed back to life.
-- Per key: one ZMSCORE for all its ids, one ZADD XX for the live ones (in chunks, so a long
-- argument list stays within Lua's stack), so the cost is a few commands per key, not per
-- lease. Needs Redis 6.2 (ZMSCORE).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[1])
local expiry = string.format('%.0f', now + ttl)
local chunk = 1000
local lost = {}
local a = 2
for _, key in ipairs(KEYS) do
  local n = tonumber(ARGV[a])
  a = a + 1
  local first = a
  a = a + n
  local from = first
  while from < first + n do
    local to = math.min(from + chunk, first + n) - 1
    local ids = {}
    for i = from, to do
      ids[#ids + 1] = ARGV[i]
    end
    local scores = redis.call('ZMSCORE', key, unpack(ids))
    local live = {}
    local dead = {}
    for i, id in ipairs(ids) do
      local score = scores[i]
      if score and tonumber(score) > now then
        live[#live + 1] = expiry
        live[#live + 1] = id
      else
        if score then
          dead[#dead + 1] = id
        end
        lost[#lost + 1] = id
      end
    end
    if #live > 0 then
      redis.call('ZADD', key, 'XX', unpack(live))
    end
    if #dead > 0 then
      redis.call('ZREM', key, unpack(dead))
    end
    from = to + 1
  end
  -- From the highest score (see grant.lua), so a shorter TTL never cuts a longer lease's set.
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', key, math.ceil(tonumber(last[2]) / 1000) + 1000)
  end
end
return lost
