-- recover.lua: one pass of stalled recovery over (part of) one queue's active set.
-- KEYS[1]  base of the queue
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  threshold (s): stalled when max(heartbeat_at, claimed_at) < now - threshold
-- ARGV[3]  max_stalled: a job already recovered that many times fails into the DLQ instead
-- ARGV[4]  most jobs examined in this call
-- Returns  {requeued ids, failed ids, unreadable ids, examined count}
-- Candidates come from a range of the active set (scored by last heartbeat); each is then
-- re-checked on its record inside this same script: still active, still stale (the token
-- cannot change between the read and the write: the script is atomic). Requeued jobs count a
-- stall and re-enter waiting through the FIFO allocator; unreadable ones go to the DLQ.
local base = KEYS[1]
local now, nows = clock(ARGV[1])
local cutoff = now - tonumber(ARGV[2])
local max_stalled = tonumber(ARGV[3])
local akey = base .. ':active'
local ids = redis.call('ZRANGEBYSCORE', akey, '-inf', '(' .. fmt(cutoff), 'LIMIT', 0, tonumber(ARGV[4]))
local requeued, failed, unreadable = {}, {}, {}
for _, id in ipairs(ids) do
  local jk = job_key(base, id)
  local r = read(jk, 'state', 'heartbeat_at', 'claimed_at', 'stalls', 'priority', 'token',
    'created_at')
  if r == nil or state_problem(r[1]) then
    quarantine(base, jk, id, 'active', nows, r == nil and NOT_A_HASH or state_problem(r[1]))
    unreadable[#unreadable + 1] = id
  elseif r[1] ~= 'active' then
    redis.call('ZREM', akey, id) -- not active any more: a stray entry, nothing to recover
  else
    local hb, claimed = tonumber(r[2] or '0'), tonumber(r[3] or '0')
    local stalls, priority = tonumber(r[4] or '0'), tonumber(r[5])
    local sound = tonumber(r[6] or '0') and tonumber(r[7] or '')
    if hb == nil or claimed == nil or stalls == nil or priority == nil or not sound then
      quarantine(base, jk, id, 'active', nows,
        "heartbeat_at, claimed_at, stalls, priority, token or created_at is not a number")
      unreadable[#unreadable + 1] = id
    else
      local last = math.max(hb, claimed)
      if last >= cutoff then
        redis.call('ZADD', akey, fmt(last), id) -- fresh after all: repair its score
      elseif stalls >= max_stalled then
        finish(base, jk, id, 'active', 'failed', nows)
        redis.call('HSET', jk, 'error',
          'stalled ' .. (stalls + 1) .. ' times (max_stalled=' .. max_stalled .. ')')
        failed[#failed + 1] = id
      else
        redis.call('ZREM', akey, id)
        redis.call('HSET', jk, 'stalls', stalls + 1)
        redis.call('HDEL', jk, 'worker_id')
        make_waiting(base, jk, id, priority, nil)
        requeued[#requeued + 1] = id
      end
    end
  end
end
if #requeued > 0 then
  redis.call('HINCRBY', base .. ':meta', 'stalled', #requeued)
  wake(base, #requeued)
end
return {requeued, failed, unreadable, #ids}
