-- enqueue.lua: store new jobs of one queue as waiting (or delayed), in order.
-- mirrors relaymq.policy.key_step (take_key) and relaymq.policy.dependencies_at_enqueue
-- (wait_for)
-- KEYS[1]  base of the queue ("<prefix>:{<queue>}")
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  the events channel ('' = publish nothing; '?<channel>': only when a client of this
--          server subscribes to it, as PUBSUB NUMSUB counts them: not on a cluster, whose
--          subscribers may be on other nodes), ARGV[3] the queue's name,
-- ARGV[4]  the events' time (seconds since the epoch, as text; it goes out as it came)
-- ARGV[5]  the number of arguments per job: 3, 4 when the jobs carry key rules, 5 when they
--          also carry dependencies, 6 when they also carry sequences
-- ARGV[6..] per job: "<priority> <delay s> <ttl s|-> <max_attempts> <timeout s|->
--           <traceparent|-> <=limit_key|-> <id>" (- = none), task, payload, with 4 the job's
--           key rule:
--           "throttle <window s> <key>", "debounce 0 <key>" or '' (none), and with 5 its
--           dependencies: "<policy> <JSON array of job ids>" or '' (none), and with 6 its
--           sequence: "<hold|continue> <sequence>" or '' (none)
-- Returns  with 3: one integer per job, 1 = stored, 0 = duplicate (the id exists in this
--          queue). With 4, 5 or 6: two values per job: 1 and the id of the job it replaced (''),
--          or 0 and '' (a duplicate id), or 0 and the id of the job holding the key (throttled).
-- A job with dependencies is stored blocked while any has not ended (base:deps:<dep> lists it,
-- and the dependency's hash gets dependents = 1); failed at once when one ended other than
-- completed and its policy is 'fail'; otherwise as any job.
-- Each stored job gets the next FIFO sequence; a wake-up token goes out per waiting job.
-- A job of a sequence keeps that number as its sequence_pos and joins base:seq:<sequence>
-- with it (lib.lua): its place in the sequence is fixed here, in enqueue order.
-- With a channel, one framed message of the enqueue's facts goes out too (per job: stored
-- waiting, stored delayed, or a duplicate): the enqueue is one round trip. The facts are the
-- ones relaymq.events.enqueue_facts describes, and events.py alone turns them into events.
-- Keys (base:keys, key -> holder id; base:key_until, a zset of keys by the end of their throttle
-- window, so that prune_keys.lua finds the ended ones in order): a
-- throttled job is dropped while its key's holder is pending or its window open; a debounced
-- one deletes a waiting or delayed holder. Then the new job holds the key.
local base = KEYS[1]
local now, nows = clock(ARGV[1])
local meta = base .. ':meta'
local seq = tonumber(redis.call('HGET', meta, 'seq') or '0')
local out = {}
local waiting = {}
local delayed = {}
local announced = {}
local channel, queue, at, stride = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
if string.sub(channel, 1, 1) == '?' then -- nobody hears it: no facts to gather and encode
  channel = string.sub(channel, 2)
  if redis.call('PUBSUB', 'NUMSUB', channel)[2] == 0 then
    channel = ''
  end
end
local PENDING = {waiting = true, delayed = true, active = true}

local function flush()
  if #waiting > 0 then
    redis.call('ZADD', base .. ':waiting', unpack(waiting))
    wake(base, #waiting / 2)
    waiting = {}
  end
  if #delayed > 0 then
    redis.call('ZADD', base .. ':delayed', unpack(delayed))
    delayed = {}
  end
end

-- mirrors relaymq.policy.key_step
-- Apply a key rule for job id: the holder's id when the job is throttled (nothing changes),
-- else nil and the id of the job it replaced ('' for none), once the job holds the key.
local function take_key(id, rule)
  local mode, window, key = string.match(rule, '^(%S+) (%S+) (.*)$')
  local holder = redis.call('HGET', base .. ':keys', key)
  local replaced = ''
  if holder then
    local r = read(job_key(base, holder), 'state', 'sequence')
    local state = r and r[1]
    if mode == 'throttle' then
      local untils = tonumber(redis.call('ZSCORE', base .. ':key_until', key) or '0')
      if untils > now or PENDING[state] then
        return holder, ''
      end
    elseif state == 'waiting' or state == 'delayed' then
      flush() -- the holder may have been stored earlier in this batch
      redis.call('ZREM', base .. ':' .. state, holder)
      if state == 'waiting' then
        left_line(base)
      end
      redis.call('DEL', job_key(base, holder))
      sequence_ended(base, holder, r[2], nil, nil)
      if redis.call('EXISTS', base .. ':deps:' .. holder) == 1 then
        dependency_ended(base, holder, 'removed', nows)
      end
      replaced = holder
    end
  end
  redis.call('HSET', base .. ':keys', key, id)
  redis.call('ZADD', base .. ':key_until', fmt(now + tonumber(window)), key)
  return nil, replaced
end

-- mirrors relaymq.policy.dependencies_at_enqueue
-- Record job id's dependencies ("<policy> <JSON ids>"): whether it is blocked (and on how
-- many), or the error that fails it at once.
local function wait_for(id, jk, spec)
  local policy, list = string.match(spec, '^(%S+) (.*)$')
  local deps = cjson.decode(list)
  local pending, bad, seen = {}, nil, {}
  for _, dep in ipairs(deps) do
    if not seen[dep] then
      seen[dep] = true
      local r = read(job_key(base, dep), 'state')
      local state = r and r[1]
      if state and not TERMINAL[state] then
        pending[#pending + 1] = dep
      elseif state ~= 'completed' and bad == nil and policy == 'fail' then
        bad = 'dependency ' .. dep .. ' ended ' .. (state or 'removed')
      end
    end
  end
  redis.call('HSET', jk, 'depends_on', list, 'dep_policy', policy)
  if bad then
    return false, bad
  end
  for _, dep in ipairs(pending) do
    redis.call('SADD', base .. ':deps:' .. dep, id)
    redis.call('HSET', job_key(base, dep), 'dependents', '1')
  end
  if #pending > 0 then
    redis.call('HSET', jk, 'pending', #pending)
    return true, nil
  end
  return false, nil
end

for i = 6, #ARGV, stride do
  local priority_s, delay_s, ttl, max_attempts, timeout, traceparent, limit_key, id =
    string.match(ARGV[i], '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (.*)$')
  local jk = job_key(base, id)
  local fact = 'waiting'
  local holder, replaced = nil, ''
  if redis.call('EXISTS', jk) == 1 then
    holder = ''
  elseif stride >= 4 and ARGV[i + 3] ~= '' then
    holder, replaced = take_key(id, ARGV[i + 3])
  end
  if holder then
    out[#out + 1] = 0
    if stride >= 4 then
      out[#out + 1] = holder
    end
    fact = 'duplicate'
  else
    seq = seq + 1
    local priority = tonumber(priority_s)
    local delay = tonumber(delay_s)
    local state = 'waiting'
    local blocked, bad = false, nil
    if stride == 5 and ARGV[i + 4] ~= '' then
      blocked, bad = wait_for(id, jk, ARGV[i + 4])
    end
    if bad then
      state = 'failed'
      redis.call('HSET', jk, 'finished_at', nows, 'error', bad)
      redis.call('ZADD', base .. ':failed', nows, id)
    elseif blocked then
      state = 'blocked'
      redis.call('ZADD', base .. ':blocked', seq, id)
    elseif delay > 0 then
      state = 'delayed'
      fact = 'delayed'
      local run_at = fmt(now + delay)
      redis.call('HSET', jk, 'run_at', run_at)
      delayed[#delayed + 1] = run_at
      delayed[#delayed + 1] = id
    else
      waiting[#waiting + 1] = fmt(priority * PRIORITY_SHIFT + seq)
      waiting[#waiting + 1] = id
    end
    redis.call('HSET', jk, 'task', ARGV[i + 1], 'payload', ARGV[i + 2], 'state', state,
      'priority', priority_s, 'seq', seq, 'created_at', nows, 'max_attempts', max_attempts)
    if ttl ~= '-' then
      redis.call('HSET', jk, 'ttl', ttl)
    end
    if timeout ~= '-' then
      redis.call('HSET', jk, 'timeout', timeout)
    end
    if traceparent ~= '-' then
      redis.call('HSET', jk, 'traceparent', traceparent)
    end
    if limit_key ~= '-' then
      redis.call('HSET', jk, 'limit_key', string.sub(limit_key, 2))
    end
    if stride == 6 and ARGV[i + 5] ~= '' then
      local on_failure, name = string.match(ARGV[i + 5], '^(%S+) (.*)$')
      redis.call('HSET', jk, 'sequence', name, 'seq_failure', on_failure, 'sequence_pos', seq)
      if state ~= 'failed' then
        sequence_rejoin(base, id, name, seq)
      end
    end
    out[#out + 1] = 1
    if stride >= 4 then
      out[#out + 1] = replaced
    end
  end
  if channel ~= '' then
    announced[#announced + 1] = {fact, queue, id}
  end
end
redis.call('HSET', meta, 'seq', seq)
flush()
if #announced > 0 then
  local message = cjson.encode({at = at, enqueued = announced})
  redis.call('PUBLISH', channel, struct.pack('>I4', #message) .. message)
end
return out
