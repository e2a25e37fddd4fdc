-- retry_jobs.lua: operator retry / DLQ replay of one job or a batch.
-- KEYS[1]  base of the queue
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2..] job ids, in the order they join the back of the line
-- Returns  one number per id: 1 when the job is waiting again (attempts and stalls reset, a
--          new sequence, created_at = now: its TTL counts from the replay), 0 when it is not
--          failed, expired or cancelled. A job of a sequence holds its place in it again, at
--          its enqueue position (lib.lua sequence_rejoin).
local base = KEYS[1]
local _, nows = clock(ARGV[1])
local out = {}
local moved = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local jk = job_key(base, id)
  local r = read(jk, 'state', 'priority', 'sequence', 'sequence_pos')
  local priority = r and tonumber(r[2])
  if r and (r[1] == 'failed' or r[1] == 'expired' or r[1] == 'cancelled') and priority then
    redis.call('ZREM', base .. ':' .. r[1], id)
    redis.call('HSET', jk, 'attempts', 0, 'stalls', 0, 'created_at', nows)
    redis.call('HDEL', jk, 'cancel_requested', 'finished_at')
    make_waiting(base, jk, id, priority, nil)
    sequence_rejoin(base, id, r[3], r[4])
    moved = moved + 1
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
wake(base, moved)
return out
