-- cancel.lua: an operator cancels a waiting, delayed or active job.
-- KEYS[1]  base of the queue
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  job id
-- Returns  'cancelled', 'already_terminal', 'not_found' or 'unreadable'.
-- An active job's claim is lost at once; cancel_requested tells its worker's heartbeat.
local base = KEYS[1]
local _, nows = clock(ARGV[1])
local id = ARGV[2]
local jk = job_key(base, id)
local r = read(jk, 'state')
if r == nil then
  return 'unreadable'
end
local state = r[1]
if not state then
  return 'not_found'
end
if TERMINAL[state] then
  return 'already_terminal'
end
finish(base, jk, id, state, 'cancelled', nows)
redis.call('HSET', jk, 'error', 'cancelled by request')
if state == 'active' then
  redis.call('HSET', jk, 'cancel_requested', '1')
else
  redis.call('HDEL', jk, 'cancel_requested')
end
return 'cancelled'
