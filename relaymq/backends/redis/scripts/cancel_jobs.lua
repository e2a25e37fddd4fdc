-- cancel_jobs.lua: an operator cancels a batch of jobs (cancel.lua, once per id).
-- KEYS[1]  base of the queue
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2..] job ids
-- Returns  one number per id: 1 when the job was waiting, delayed or active and is now
--          cancelled; 0 when it had ended, is absent or is unreadable.
local base = KEYS[1]
local _, nows = clock(ARGV[1])
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local jk = job_key(base, id)
  local r = read(jk, 'state')
  local state = r and r[1]
  if state and not TERMINAL[state] then
    finish(base, jk, id, state, 'cancelled', nows)
    redis.call('HSET', jk, 'error', 'cancelled by request')
    if state == 'active' then
      redis.call('HSET', jk, 'cancel_requested', '1')
    else
      redis.call('HDEL', jk, 'cancel_requested')
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
