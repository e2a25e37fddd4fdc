-- retry_job.lua: operator retry / DLQ replay of a failed, expired or cancelled job.
-- KEYS[1]  base of the queue
-- ARGV[1]  job id
-- ARGV[2]  now ('' = server TIME)
-- Returns  1 when the job is waiting again (attempts and stalls reset, a new sequence,
--          created_at = now: its TTL counts from the replay),
--          0 when it is not in one of those states.
local base = KEYS[1]
local id = ARGV[1]
local _, nows = clock(ARGV[2])
local jk = job_key(base, id)
local r = read(jk, 'state', 'priority')
if r == nil or not (r[1] == 'failed' or r[1] == 'expired' or r[1] == 'cancelled') then
  return 0
end
local priority = tonumber(r[2])
if priority == nil then
  return 0
end
redis.call('ZREM', base .. ':' .. r[1], id)
redis.call('HSET', jk, 'attempts', 0, 'stalls', 0, 'created_at', nows)
redis.call('HDEL', jk, 'cancel_requested', 'finished_at')
make_waiting(base, jk, id, priority, nil)
wake(base, 1)
return 1
