-- pause_schedule.lua: set a schedule's paused flag, and its next tick unless ARGV[2] is ''.
-- KEYS[1]  the schedule's hash
-- ARGV     paused ('1'/'0'), next_ms or ''
-- Returns  1 when the schedule exists, 0 when it does not (nothing is created).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'paused', ARGV[1])
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'next_ms', ARGV[2])
end
return 1
