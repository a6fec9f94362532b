-- Prepended to gcra.lua and grant.lua: a key's rate (GCRA) and its pause, on Redis's clock.
-- A key's state is its TAT (theoretical arrival time, Redis TIME microseconds) and its
-- "paused until"; `since` is the epoch's start (see epoch.lua).
-- rate_check answers {0, next TAT} when a start is allowed now (nothing is written: the
-- caller takes it with rate_take once everything else allows the start), {1, micros} when
-- the rate allows none yet, {2, micros} while the key is paused.
local function rate_check(tat_key, paused_key, interval, tolerance, since, now)
  local paused = tonumber(redis.call('GET', paused_key) or '0')
  if paused > now then
    return {2, paused - now}
  end
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
    return {1, allowed_at - now}
  end
  return {0, tat + interval}
end
-- Takes the start rate_check allowed. The state is only needed while it is ahead of now: an
-- idle key's state disappears.
local function rate_take(tat_key, next_tat, now)
  redis.call('SET', tat_key, string.format('%.0f', next_tat), 'PX', math.ceil((next_tat - now) / 1000) + 1)
end
