-- Prepended to gcra.lua, grant.lua and pause_check.lua: a key's pause and its rate (GCRA) on
-- Redis's clock, and how a script answers a wait.
-- A key's state is its "paused until" and its TAT (theoretical arrival time), both Redis TIME
-- microseconds; `since` is the epoch's start (see epoch.lua).

-- The longest wait a script answers, in microseconds: 2^53 (about 285 years), the largest
-- whole number a Lua number (a double) holds exactly, far inside Redis's integer reply. A
-- longer wait (a rate's interval beyond it, a pause written by another tool) is answered as
-- this: Redis turns a number beyond its integer range into an arbitrary one (a negative,
-- which a caller would read as no wait at all, and ask again in a loop).
local longest_wait = 9007199254740992
local function wait_reply(micros)
  if micros > longest_wait then
    return longest_wait
  elseif micros < 0 then
    return 0
  end
  return micros
end

-- The time left of a key's pause in microseconds, or nil when it is not paused.
local function pause_left(paused_key, now)
  local paused = tonumber(redis.call('GET', paused_key) or '0')
  if paused > now then
    return paused - now
  end
  return nil
end

-- rate_check answers {0, next TAT} when a start is allowed now (nothing is written: the
-- caller takes it with rate_take once everything else allows the start), or {1, micros}
-- when the rate allows none yet. The pause is the caller's to check first (pause_left).
local function rate_check(tat_key, interval, tolerance, since, now)
  local tat = tonumber(redis.call('GET', tat_key) or '0')
  if tat == 0 then
    -- No state: an idle key, or one whose TAT Redis lost with its data before `since`. A
    -- lost TAT was at most (start before the loss) + tolerance + interval, and that start
    -- was before `since`: so assume the worst, a start at `since`.
    tat = since + tolerance + interval
  end
  if tat < now then
    tat = now
  end
  local allowed_at = tat - tolerance
  if allowed_at > now then
    return {1, wait_reply(allowed_at - now)}
  end
  return {0, tat + interval}
end
-- Takes the start rate_check allowed. The state is only needed while it is ahead of now: an
-- idle key's state disappears.
local function rate_take(tat_key, next_tat, now)
  redis.call('SET', tat_key, string.format('%.0f', next_tat), 'PX', math.ceil((next_tat - now) / 1000) + 1)
end
