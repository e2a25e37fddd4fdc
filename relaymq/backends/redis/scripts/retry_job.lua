-- retry_job.lua: operator retry / DLQ replay of a failed, expired or cancelled job.
-- KEYS[1]  base of the queue
-- ARGV[1]  job id
-- Returns  1 when the job is waiting again (attempts and stalls reset, a new sequence),
--          0 when it is not in one of those states.
local base = KEYS[1]
local id = ARGV[1]
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
redis.call('HSET', jk, 'attempts', 0, 'stalls', 0)
redis.call('HDEL', jk, 'cancel_requested', 'finished_at')
make_waiting(base, jk, id, priority, nil)
wake(base, 1)
return 1
