-- advance_schedule.lua: compare and set a schedule's next tick (one scheduler moves it).
-- KEYS[1]  the schedule's hash
-- ARGV     expected_ms, next_ms
-- Returns  1 when next_ms was expected_ms and is now next_ms, 0 otherwise.
if redis.call('HGET', KEYS[1], 'next_ms') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'next_ms', ARGV[2])
return 1
