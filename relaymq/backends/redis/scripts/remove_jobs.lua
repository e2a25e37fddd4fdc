-- remove_jobs.lua: delete one job or a batch, in any state (an active job's claim is lost).
-- KEYS[1]  base of the queue
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2..] job ids
-- Returns  one number per id: 1 when a record was deleted, 0 when there was none.
-- A job deleted before it ended counts as ended ('removed') for the jobs blocked on it; a
-- job of a sequence leaves it.
local base = KEYS[1]
local _, nows = clock(ARGV[1])
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local jk = job_key(base, id)
  local r = read(jk, 'state', 'sequence')
  if r and not r[1] then
    out[#out + 1] = 0
  else
    if r and not state_problem(r[1]) then
      redis.call('ZREM', base .. ':' .. r[1], id)
    else -- unreadable, or in a state nobody knows: it may sit in any set
      for _, s in ipairs({'blocked', 'waiting', 'delayed', 'active', 'completed', 'failed',
                          'expired', 'cancelled'}) do
        redis.call('ZREM', base .. ':' .. s, id)
      end
    end
    if not (r and r[1] ~= 'waiting' and not state_problem(r[1])) then
      left_line(base)
    end
    redis.call('DEL', jk)
    sequence_ended(base, id, r and r[2], nil, nil)
    if redis.call('EXISTS', base .. ':deps:' .. id) == 1 then
      dependency_ended(base, id, 'removed', nows)
    end
    out[#out + 1] = 1
  end
end
return out
