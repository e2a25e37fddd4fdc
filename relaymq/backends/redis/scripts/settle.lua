-- settle.lua: apply a batch of fenced transitions out of active, for one queue.
-- KEYS[1]  base of the queue
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2..] 2 per settle: "<token> <outcome> <delay> <ran_for> <keep> <id>" (outcome:
--           complete|retry|fail|expire|cancel|release; delay and ran_for in s, ran_for '-' =
--           none; keep: the attempts the job's history keeps), then the value: the result for
--           complete, the error for the others ('' = none, '=' .. bytes)
-- Returns  one integer per settle: 1 = applied, or a repeat of a terminal transition that
--          already applied with this token (a lost reply); 0 = claim lost, nothing changed.
-- Applies only while state == active and token matches. complete -> completed (result);
-- fail/expire -> failed/expired (the DLQ, error); cancel -> cancelled; retry -> delayed at
-- now + delay, or waiting through the allocator when delay == 0; release -> waiting with its
-- own sequence (keeps its place) and the attempt given back. A job of a sequence that
-- completes or is cancelled leaves it, and so does a dead-lettered one enqueued with
-- 'continue' (lib.lua sequence_ended); a retried one keeps its place. Every applied settle adds its
-- attempt to the job's attempt_history (add_attempt in lib.lua).
local base = KEYS[1]
local now, nows = clock(ARGV[1])
local TARGET = {complete = 'completed', fail = 'failed', expire = 'expired', cancel = 'cancelled'}
local out = {}
local woke = 0
local left = {} -- ids that leave the active set
local finished = {} -- target state -> {score, id, ...}
for i = 2, #ARGV, 2 do
  local token, outcome, delay, ran_for, keep, id =
    string.match(ARGV[i], '^(%d+) (%a+) (%S+) (%S+) (%d+) (.*)$')
  local value = ARGV[i + 1]
  local jk = job_key(base, id or '')
  local r = id and read(jk, 'state', 'token', 'dependents', 'attempts', 'claimed_at', 'worker_id',
    'attempt_history', 'sequence', 'seq_failure')
  local target = TARGET[outcome]
  local answer = 0
  if r and r[2] == token then
    local priority, seq, attempts = 0, 0, 0
    if r[1] == 'active' and not target then
      local more = read(jk, 'priority', 'seq', 'attempts')
      priority, seq, attempts = tonumber(more[1]), tonumber(more[2]), tonumber(more[3] or '0')
    end
    if r[1] == 'active' and priority and seq and attempts then
      answer = 1
      left[#left + 1] = id
      local error = nil
      if outcome ~= 'complete' and value ~= '' then
        error = string.sub(value, 2)
      end
      add_attempt(jk, {r[4], r[5], r[6], r[7]}, outcome, nows, ran_for, tonumber(keep), error)
      -- worker_id stays behind: it is read back only while the job is active (keys.py).
      if target then
        if value == '' then
          local field = 'error'
          if outcome == 'complete' then
            field = 'result'
          end
          redis.call('HSET', jk, 'state', target, 'finished_at', nows)
          redis.call('HDEL', jk, field)
        elseif outcome == 'complete' then
          redis.call('HSET', jk, 'state', target, 'finished_at', nows, 'result',
            string.sub(value, 2))
        else
          redis.call('HSET', jk, 'state', target, 'finished_at', nows, 'error',
            string.sub(value, 2))
        end
        if r[3] then
          dependency_ended(base, id, target, nows)
        end
        sequence_ended(base, id, r[8], r[9], target)
        local set = finished[target]
        if set == nil then
          set = {}
          finished[target] = set
        end
        set[#set + 1] = nows
        set[#set + 1] = id
      else
        if outcome == 'retry' then
          set_opt(jk, 'error', value)
          delay = tonumber(delay) or 0
          if delay > 0 then
            local run_at = fmt(now + delay)
            redis.call('ZADD', base .. ':delayed', run_at, id)
            redis.call('HSET', jk, 'state', 'delayed', 'run_at', run_at)
          else
            make_waiting(base, jk, id, priority, nil)
            woke = woke + 1
          end
        else -- release
          redis.call('HSET', jk, 'attempts', attempts - 1)
          make_waiting(base, jk, id, priority, seq)
          woke = woke + 1
        end
      end
    elseif target and r[1] == target then
      answer = 1
    end
  end
  out[#out + 1] = answer
end
if #left > 0 then
  redis.call('ZREM', base .. ':active', unpack(left))
end
for state, set in pairs(finished) do
  redis.call('ZADD', base .. ':' .. state, unpack(set))
end
wake(base, #left > 0 and woke or 0)
return out
