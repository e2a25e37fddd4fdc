-- cancel_jobs.lua: an operator cancels blocked, waiting, delayed or active jobs (one or a
-- batch).
-- KEYS[1]  base of the queue
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2..] job ids
-- Returns  one answer per id: 'cancelled', 'already_terminal', 'not_found' or 'unreadable'.
-- An active job's claim is lost at once; cancel_requested tells its worker's heartbeat.
local base = KEYS[1]
local _, nows = clock(ARGV[1])
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local jk = job_key(base, id)
  local r = read(jk, 'state')
  local state = r and r[1]
  if r == nil or state_problem(state) then
    out[#out + 1] = 'unreadable'
  elseif not state then
    out[#out + 1] = 'not_found'
  elseif TERMINAL[state] then
    out[#out + 1] = 'already_terminal'
  else
    finish(base, jk, id, state, 'cancelled', nows)
    redis.call('HSET', jk, 'error', 'cancelled by request')
    if state == 'active' then
      redis.call('HSET', jk, 'cancel_requested', '1')
    else
      redis.call('HDEL', jk, 'cancel_requested')
    end
    out[#out + 1] = 'cancelled'
  end
end
return out
