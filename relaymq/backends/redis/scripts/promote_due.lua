-- promote_due.lua: move due delayed jobs to waiting and return them (for a broker to deliver).
-- KEYS[1]  base of the queue
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  most jobs promoted
-- Returns  {id1, job1, id2, job2, ...} in run-time order (FIFO among equal run times), job =
--          the values in FIELDS order.
-- Promoted jobs get a new sequence through the FIFO allocator; idle workers are woken.
local base = KEYS[1]
local now, nows = clock(ARGV[1])
local dkey = base .. ':delayed'
local due, order = due_jobs(base, now, tonumber(ARGV[2]))
local out = {}
for _, o in ipairs(order) do
  local id, jk, r = o.id, o.jk, o.r
  if r and r[1] == 'delayed' and tonumber(r[2]) then
    make_waiting(base, jk, id, tonumber(r[2]), nil)
    out[#out + 1] = id
    out[#out + 1] = read(jk, unpack(FIELDS))
  else
    local why = r == nil and NOT_A_HASH or state_problem(r[1])
    if why or r[1] == 'delayed' then
      quarantine(base, jk, id, 'delayed', nows, why or "priority is not a number")
    end
  end
end
if #due > 0 then
  redis.call('ZREM', dkey, unpack(due))
end
wake(base, #out / 2)
return out
