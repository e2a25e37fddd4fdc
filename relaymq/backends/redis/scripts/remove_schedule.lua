-- remove_schedule.lua: delete a schedule and its id.
-- KEYS[1]  the schedule's hash
-- KEYS[2]  the set of schedule ids
-- ARGV     id
-- Returns  1 when it existed, 0 otherwise.
redis.call('SREM', KEYS[2], ARGV[1])
return redis.call('DEL', KEYS[1])
