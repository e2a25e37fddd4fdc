-- save_schedule.lua: create or update a schedule; an unchanged spec keeps the stored state.
-- KEYS[1]  the schedule's hash (spec, next_ms, paused)
-- KEYS[2]  the set of schedule ids
-- ARGV     id, spec, next_ms, paused ('1'/'0', for a new schedule)
-- Returns  1 when the schedule is new or its spec changed (next_ms replaced, paused kept),
--          0 when the same spec was stored (nothing changes).
local stored = redis.call('HGET', KEYS[1], 'spec')
if stored == ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'spec', ARGV[2], 'next_ms', ARGV[3])
if redis.call('HSETNX', KEYS[1], 'paused', ARGV[4]) == 1 then
  redis.call('SADD', KEYS[2], ARGV[1])
end
return 1
