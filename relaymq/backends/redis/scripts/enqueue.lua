-- enqueue.lua: store new jobs of one queue as waiting (or delayed), in order.
-- KEYS[1]  base of the queue ("<prefix>:{<queue>}")
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  the events channel ('' = publish nothing), ARGV[3] the queue's name,
-- ARGV[4]  the events' time
-- ARGV[5..] 3 per job: "<priority> <delay s> <ttl s|-> <max_attempts> <timeout s|->
--           <traceparent|-> <id>" (- = none), task, payload
-- Returns  one integer per job: 1 = stored, 0 = duplicate (the id exists in this queue).
-- Each stored job gets the next FIFO sequence; a wake-up token goes out per waiting job.
-- With a channel, one framed message of events goes out too (job:waiting, job:delayed or
-- job:deduplicated per job, as events.py writes them): the enqueue is one round trip.
local base = KEYS[1]
local now, nows = clock(ARGV[1])
local meta = base .. ':meta'
local seq = tonumber(redis.call('HGET', meta, 'seq') or '0')
local out = {}
local waiting = {}
local delayed = {}
local announced = {}
local channel, queue, at = ARGV[2], ARGV[3], tonumber(ARGV[4])
for i = 5, #ARGV, 3 do
  local priority_s, delay_s, ttl, max_attempts, timeout, traceparent, id =
    string.match(ARGV[i], '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (.*)$')
  local jk = job_key(base, id)
  local event = 'job:waiting'
  if redis.call('EXISTS', jk) == 1 then
    out[#out + 1] = 0
    event = 'job:deduplicated'
  else
    seq = seq + 1
    local priority = tonumber(priority_s)
    local delay = tonumber(delay_s)
    local state = 'waiting'
    if delay > 0 then
      state = 'delayed'
      event = 'job:delayed'
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
    out[#out + 1] = 1
  end
  if channel ~= '' then
    announced[#announced + 1] = cjson.encode({name = event, queue = queue, at = at, job_id = id,
      data = {}})
  end
end
redis.call('HSET', meta, 'seq', seq)
if #waiting > 0 then
  redis.call('ZADD', base .. ':waiting', unpack(waiting))
  wake(base, #waiting / 2)
end
if #delayed > 0 then
  redis.call('ZADD', base .. ':delayed', unpack(delayed))
end
if #announced > 0 then
  local message = '[' .. table.concat(announced, ',') .. ']'
  redis.call('PUBLISH', channel, struct.pack('>I4', #message) .. message)
end
return out
