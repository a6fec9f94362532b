-- Prepended to grant.lua and gcra.lua (before rate.lua): the namespace's epoch, a hash {run, since}. `run` is
-- the run id (INFO server) of the Redis process that holds it, `since` the Redis time it was
-- (re)set. A missing epoch (a new or emptied Redis) or one written by another Redis process
-- (a restart that restored an RDB/AOF, a failover to a replica) means leases granted before
-- may still be held while Redis no longer counts them: it is reset to now, and nothing is
-- granted until one TTL later.
-- run: the caller's idea of the run id (read on its connection); when it matches the epoch,
-- no INFO call is needed.
local function epoch_since(key, run, now)
  local stored = redis.call('HMGET', key, 'run', 'since')
  if stored[1] and stored[1] == run and stored[2] then
    return tonumber(stored[2])
  end
  local actual = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
  if stored[1] and stored[1] == actual and stored[2] then
    return tonumber(stored[2])
  end
  redis.call('HSET', key, 'run', actual, 'since', string.format('%.0f', now))
  return now
end
