-- lib.lua: helpers shared by every script in this folder.
-- RedisBackend prepends this file to each script before loading it, so each script is still
-- one atomic EVALSHA. Nothing here runs on its own. A queue's keys are "<base>:<suffix>" with
-- base = "<prefix>:{<queue>}" (see keys.py); a state's set is "<base>:<state name>".

local PRIORITY_SHIFT = 1099511627776 -- 2^40: waiting score = priority * 2^40 + seq (exact)
local KEY_SCAN = 1000 -- relaymq.policy.KEY_SCAN
local WAKE_MAX = 32
local TERMINAL = {completed = true, failed = true, expired = true, cancelled = true}
-- The states relaymq knows (relaymq.backends.corrupt.STATES).
local STATES = {blocked = true, waiting = true, delayed = true, active = true, completed = true,
  failed = true, expired = true, cancelled = true}
-- The fields of a job hash in the order records travel to Python (keys.JOB_FIELDS; a test
-- checks the two lists agree). Absent fields travel as nil.
local FIELDS = {'task', 'payload', 'state', 'priority', 'seq', 'created_at', 'run_at', 'ttl',
  'max_attempts', 'timeout', 'attempts', 'token', 'claimed_at', 'heartbeat_at', 'worker_id',
  'stalls', 'cancel_requested', 'progress', 'result', 'error', 'finished_at', 'traceparent',
  'depends_on', 'dep_policy', 'limit_key', 'attempt_history', 'sequence', 'seq_failure'}

-- Numbers go back to Redis with 17 significant digits: every double round-trips exactly.
local function fmt(x)
  return string.format('%.17g', x)
end

-- The clock: a test clock passes its reading (a decimal string); otherwise the server's TIME.
-- Returns the time as a number and as the exact string to store.
local function clock(arg)
  if arg ~= nil and arg ~= '' then
    return tonumber(arg), arg
  end
  local t = redis.call('TIME')
  local s = t[1] .. '.' .. string.format('%06d', tonumber(t[2]))
  return tonumber(s), s
end

-- mirrors relaymq.policy.allowance (and, for `keys`, relaymq.policy.KeyBudget)
-- The queue's limits, the same arithmetic: nil when it has none;
-- `keys` (nil unless the queue limits its keys' rate or active jobs) is the per-key budget:
-- with a cap per key, the key of every active job (stalled ones too) is counted here, so only
-- such queues pay for reading them;
-- else how many of `want` jobs may start now, the current rate window and the starts counted
-- in it, and (when the rate held the claim back) the seconds until that window ends, or ''.
local function allowance(base, now, want)
  local l = redis.call('HMGET', base .. ':limits', 'max_active', 'rate', 'per', 'window', 'used',
    'key_rate', 'key_per', 'key_window', 'key_used', 'key_max_active', 'fair', 'weights',
    'fair_served', 'fair_skip', 'fair_skip_score')
  if not l[3] then
    return nil
  end
  local keys = nil -- the per-key budget (key_take)
  if l[6] or l[10] or l[11] then
    local key_per = tonumber(l[7] or '1')
    local key_window = math.floor(now / key_per)
    local key_used = {}
    if l[6] and tonumber(l[8] or '-1') == key_window and l[9] then
      key_used = cjson.decode(l[9])
    end
    local active = {}
    if l[10] then
      for _, id in ipairs(redis.call('ZRANGE', base .. ':active', 0, -1)) do
        local key = redis.pcall('HGET', base .. ':job:' .. id, 'limit_key')
        if type(key) == 'string' then
          active[key] = (active[key] or 0) + 1
        end
      end
    end
    local weights, served = {}, {}
    if l[11] then
      for _, pair in ipairs(cjson.decode(l[12] or '[]')) do
        weights[pair[1]] = pair[2]
      end
      if l[13] then
        served = cjson.decode(l[13])
      end
    end
    keys = {rate = tonumber(l[6]), cap = tonumber(l[10]), window = key_window, used = key_used,
            active = active, held = false, rate_held = false, fair = l[11] ~= false,
            weights = weights, served = served, new_round = false,
            skip = l[11] and tonumber(l[14] or '0') or 0, skip_score = l[15], skip_last = nil,
            retry = fmt((key_window + 1) * key_per - now)}
  end
  local per = tonumber(l[3])
  local current = math.floor(now / per)
  local window, used = tonumber(l[4] or '0'), tonumber(l[5] or '0')
  if window ~= current then
    window, used = current, 0
  end
  local take, retry = want, ''
  if l[1] then
    take = math.min(take, math.max(0, tonumber(l[1]) - redis.call('ZCARD', base .. ':active')))
  end
  if l[2] and tonumber(l[2]) - used < take then
    take = math.max(0, tonumber(l[2]) - used)
    retry = fmt((current + 1) * per - now)
  end
  return take, window, used, retry, keys
end

local function count_starts(base, window, used)
  redis.call('HSET', base .. ':limits', 'window', fmt(window), 'used', used)
end

-- mirrors relaymq.policy.KeyBudget.refuses
-- Whether limit key `key` (false: none) is at its cap or has used its window in the per-key
-- budget `keys` (allowance), so none of its jobs may start now (it then held one back);
-- counts nothing.
local function key_refuses(keys, key)
  if type(key) ~= 'string' then
    return false
  end
  if keys.cap and (keys.active[key] or 0) >= keys.cap then
    keys.held = true
    return true
  end
  if keys.rate and (keys.used[key] or 0) >= keys.rate then
    keys.held, keys.rate_held = true, true
    return true
  end
  return false
end

-- mirrors relaymq.policy.KeyBudget.take
-- Whether a job of limit key `key` (false: none) may start within the per-key budget `keys`
-- (allowance): below its cap of active jobs and within its rate; if so, it is counted. A
-- second value says a job refused was refused only because its key had its turn this round.
local function key_take(keys, key)
  if type(key) ~= 'string' then
    return true
  end
  if key_refuses(keys, key) then
    return false
  end
  if keys.fair and (keys.served[key] or 0) >= (keys.weights[key] or 1) then
    return false, true -- had its turn in this round: passed over, not held back
  end
  if keys.rate then
    keys.used[key] = (keys.used[key] or 0) + 1
  end
  if keys.cap then
    keys.active[key] = (keys.active[key] or 0) + 1
  end
  if keys.fair then
    keys.served[key] = (keys.served[key] or 0) + 1
  end
  return true
end

-- mirrors relaymq.policy.KeyBudget.next_round: with fairness, once a claim found no more
-- candidates, begin a new round; whether to look again (at most once per claim).
local function next_round(keys)
  if not keys.fair or keys.new_round or next(keys.served) == nil then
    return false
  end
  keys.served, keys.new_round = {}, true
  keys.skip, keys.skip_last = 0, nil -- the jobs passed over for their turn may start again
  return true
end

-- When a claim the keys held back may find more: the key window's end while the rate held a
-- job back, else '' (when active jobs end); relaymq.policy.KeyBudget.retry_in.
local function key_retry(keys)
  if keys.rate then
    if keys.rate_held then
      return keys.retry
    end
    for _, n in pairs(keys.used) do
      if n >= keys.rate then
        return keys.retry
      end
    end
  end
  return ''
end

local function encode_map(t)
  if next(t) == nil then
    return '{}'
  end
  return cjson.encode(t)
end

local function key_count(base, keys)
  if keys.rate then
    redis.call('HSET', base .. ':limits', 'key_window', fmt(keys.window), 'key_used',
      encode_map(keys.used))
  end
  if keys.fair then
    redis.call('HSET', base .. ':limits', 'fair_served', encode_map(keys.served))
    if keys.skip_last then
      keys.skip_score = redis.call('ZSCORE', base .. ':waiting', keys.skip_last)
    end
    if keys.skip > 0 and keys.skip_score then
      redis.call('HSET', base .. ':limits', 'fair_skip', keys.skip, 'fair_skip_score',
        keys.skip_score)
    else
      redis.call('HDEL', base .. ':limits', 'fair_skip', 'fair_skip_score')
    end
  end
end

-- A job left the line of `base` other than by a claim (cancelled, removed, replaced, purged,
-- quarantined): the jobs a fair claim passed over at the front of the line may have moved.
local function left_line(base)
  redis.call('HDEL', base .. ':limits', 'fair_skip')
end

local function job_key(base, id)
  return base .. ':job:' .. id
end

-- An optional value travels as '' (absent) or '=' .. value.
local function set_opt(jk, field, arg)
  if arg == '' then
    redis.call('HDEL', jk, field)
  else
    redis.call('HSET', jk, field, string.sub(arg, 2))
  end
end

-- The attempt a settle ends, added to the job's attempt history (a JSON array, oldest first),
-- the last keep of them (relaymq.records.store.with_attempt; keep 0: unchanged). The entry is
-- relaymq.job.Attempt's stored form, from the job's fields as claimed (attempts, claimed_at,
-- worker_id), the settle's outcome, ran_for ('-': none) and error (nil: none) and nows. A
-- history that cannot be read starts afresh.
local function add_attempt(jk, job, outcome, nows, ran_for, keep, error)
  if keep <= 0 then
    return
  end
  local attempts, claimed_at, worker, history = job[1], job[2], job[3], job[4]
  local entry = '{"attempt":' .. (tonumber(attempts) and attempts or '0') ..
    ',"outcome":"' .. outcome .. '","started_at":' ..
    (tonumber(claimed_at) and claimed_at or 'null') .. ',"ended_at":' .. nows ..
    ',"worker":' .. (worker and cjson.encode(worker) or 'null') ..
    ',"ran_for":' .. (ran_for == '-' and 'null' or ran_for) ..
    ',"error":' .. (error and cjson.encode(error) or 'null') .. '}'
  local kept = nil
  if history then
    local ok, entries = pcall(cjson.decode, history)
    if ok and type(entries) == 'table' and #entries > 0 then
      if #entries < keep then
        kept = string.sub(history, 1, -2) .. ',' .. entry .. ']'
      else
        local last = {}
        for i = #entries - keep + 2, #entries do
          last[#last + 1] = cjson.encode(entries[i])
        end
        last[#last + 1] = entry
        kept = '[' .. table.concat(last, ',') .. ']'
      end
    end
  end
  redis.call('HSET', jk, 'attempt_history', kept or ('[' .. entry .. ']'))
end

-- HMGET that never raises: nil when the key is missing-or-not-a-hash error.
local function read(jk, ...)
  local r = redis.pcall('HMGET', jk, ...)
  if type(r) ~= 'table' or r.err then
    return nil
  end
  return r
end

-- The FIFO allocator: every way into waiting passes here (enqueue, promotion, retry, recovery,
-- manual retry). seq == nil allocates the next sequence; release passes the job's own back.
local function make_waiting(base, jk, id, priority, seq)
  if seq == nil then
    seq = redis.call('HINCRBY', base .. ':meta', 'seq', 1)
  end
  redis.call('ZADD', base .. ':waiting', fmt(priority * PRIORITY_SHIFT + seq), id)
  redis.call('HSET', jk, 'state', 'waiting', 'seq', seq)
  redis.call('HDEL', jk, 'run_at')
end

-- Push up to WAKE_MAX wake-up tokens: each wakes one worker blocked in BLPOP on base:wake.
local function wake(base, n)
  if n <= 0 then
    return
  end
  if n > WAKE_MAX then
    n = WAKE_MAX
  end
  local tokens = {}
  for i = 1, n do
    tokens[i] = '1'
  end
  local key = base .. ':wake'
  redis.call('LPUSH', key, unpack(tokens))
  redis.call('LTRIM', key, 0, WAKE_MAX - 1)
end

-- A job failed by its dependency, at `nows`: counted in the queue's history (failed) in the
-- same script, as no worker writes that outcome; the day joins base:tallied, from which
-- RedisBackend moves it into the global index (this script cannot reach the global slot).
local function count_dependency_failure(base, nows)
  local minute = math.floor(tonumber(nows) / 60)
  local day = string.format('%d', math.floor(minute / 1440))
  redis.call('HINCRBY', base .. ':tallies:' .. day, string.format('%d', minute) .. ':f', 1)
  redis.call('SADD', base .. ':tallied', day)
end

-- mirrors relaymq.policy.dependency_ended
-- Job `id` ended in `state` ('removed': deleted before it ended). The jobs blocked on it
-- (base:deps:<id>; its hash has dependents = 1) count it: the last makes each due at once
-- (delayed, run_at = now); one that did not complete fails each whose policy is 'fail', which
-- ends in turn, down the chain.
local function dependency_ended(base, id, state, nows)
  local work = {{id, state}}
  while #work > 0 do
    local item = table.remove(work)
    local dep, ended = item[1], item[2]
    local dkey = base .. ':deps:' .. dep
    local waiters = redis.call('SMEMBERS', dkey)
    redis.call('DEL', dkey)
    redis.pcall('HDEL', job_key(base, dep), 'dependents')
    for _, w in ipairs(waiters) do
      local wk = job_key(base, w)
      local r = read(wk, 'state', 'dep_policy')
      if r and r[1] == 'blocked' then
        if ended ~= 'completed' and r[2] == 'fail' then
          redis.call('ZREM', base .. ':blocked', w)
          redis.call('ZADD', base .. ':failed', nows, w)
          redis.call('HSET', wk, 'state', 'failed', 'finished_at', nows, 'pending', 0,
            'error', 'dependency ' .. dep .. ' ended ' .. ended)
          count_dependency_failure(base, nows)
          work[#work + 1] = {w, 'failed'}
        elseif redis.call('HINCRBY', wk, 'pending', -1) <= 0 then
          redis.call('ZREM', base .. ':blocked', w)
          redis.call('ZADD', base .. ':delayed', nows, w)
          redis.call('HSET', wk, 'state', 'delayed', 'run_at', nows)
          wake(base, 1)
        end
      end
    end
  end
end

-- Sequences (NewJob.sequence): base:seq:<sequence> holds the ids of the jobs of the sequence
-- that hold their place (relaymq.policy.holds_sequence), scored by their enqueue position
-- (the job's sequence_pos, fixed at enqueue); base:seqs names the sequences that have such a
-- set, and base:seq_run maps a sequence to its job claimed last (active while that id is in
-- base:active).

-- mirrors relaymq.policy.holds_sequence
-- Job id of sequence `name` (false/nil: none; on_failure its seq_failure) ended in `state`,
-- or was deleted (state nil): it leaves its sequence, unless it was dead-lettered and holds it.
local function sequence_ended(base, id, name, on_failure, state)
  if type(name) ~= 'string' then
    return
  end
  if (state == 'failed' or state == 'expired') and on_failure ~= 'continue' then
    return
  end
  local key = base .. ':seq:' .. name
  redis.call('ZREM', key, id)
  if redis.call('EXISTS', key) == 0 then -- no job of it holds a place: none is active either
    redis.call('SREM', base .. ':seqs', name)
    redis.call('HDEL', base .. ':seq_run', name)
  end
end

-- Job id of sequence `name` holds its place again (a retry from the DLQ, or of a job that had
-- left): at its enqueue position `pos`.
local function sequence_rejoin(base, id, name, pos)
  if type(name) == 'string' and tonumber(pos) then
    redis.call('ZADD', base .. ':seq:' .. name, pos, id)
    redis.call('SADD', base .. ':seqs', name)
  end
end

-- mirrors relaymq.policy.sequence_head
-- Whether waiting job id of sequence `name` may start: it is the first of its sequence's set
-- and none of the sequence is active. `seen` keeps, per sequence, what this claim found
-- (its first job, or false once one of it is active or started in this claim), so a claim
-- reads each sequence once however many of its jobs it passes over.
local function sequence_free(base, id, name, seen)
  local head = seen[name]
  if head == nil then
    head = redis.call('ZRANGE', base .. ':seq:' .. name, 0, 0)[1] or false
    local last = redis.call('HGET', base .. ':seq_run', name)
    if last and redis.call('ZSCORE', base .. ':active', last) then
      head = false
    end
    seen[name] = head
  end
  return head == id
end

-- Move a job from state set `from` into the terminal state `state`.
local function finish(base, jk, id, from, state, nows)
  redis.call('ZREM', base .. ':' .. from, id)
  if from == 'waiting' then
    left_line(base)
  end
  redis.call('ZADD', base .. ':' .. state, nows, id)
  redis.call('HSET', jk, 'state', state, 'finished_at', nows)
  redis.call('HDEL', jk, 'worker_id')
  local r = redis.call('HMGET', jk, 'dependents', 'sequence', 'seq_failure')
  if r[1] then
    dependency_ended(base, id, state, nows)
  end
  sequence_ended(base, id, r[2], r[3], state)
end

-- What is wrong with a stored state, or nil for a state relaymq knows (mirrors
-- relaymq.backends.corrupt.state_problem). A record without a state was removed: not damage.
local function state_problem(state)
  if state and not STATES[state] then
    return "state is '" .. state .. "', not a job state"
  end
  return nil
end

-- A record the scripts cannot read, or in a state nobody knows, is taken out of line into the
-- DLQ (failed) with the reason, so it never blocks a claim or a recovery pass and is counted
-- and listed where the operator looks (relaymq.backends.corrupt: the rule, and `reason`, the
-- error this mirrors). `why` says what is wrong; get_jobs still reports a damaged field.
local function quarantine(base, jk, id, from, nows, why)
  local queue = string.match(base, '{(.*)}$') or base
  redis.call('ZREM', base .. ':' .. from, id)
  if from == 'waiting' then
    left_line(base)
  end
  redis.call('ZADD', base .. ':failed', nows, id)
  redis.pcall('HSET', jk, 'state', 'failed', 'finished_at', nows, 'error',
    "corrupt record for job '" .. id .. "' in queue '" .. queue .. "': " .. why)
  local r = read(jk, 'sequence', 'seq_failure')
  if r then
    sequence_ended(base, id, r[1], r[2], 'failed')
  end
  if redis.call('EXISTS', base .. ':deps:' .. id) == 1 then
    dependency_ended(base, id, 'failed', nows)
  end
end

local NOT_A_HASH = "the record is not a hash"

-- The due delayed jobs of one queue (at most `max`): their ids, and {id, jk, r} records in the
-- order they enter waiting (r = state, priority, seq; nil when unreadable). Jobs due at the same
-- moment keep their FIFO order (their sequence), not the sorted set's byte order of their ids.
local function due_jobs(base, now, max)
  local found = redis.call('ZRANGEBYSCORE', base .. ':delayed', '-inf', fmt(now), 'WITHSCORES',
                           'LIMIT', 0, max)
  local due, order = {}, {}
  for i = 1, #found, 2 do
    local id = found[i]
    local jk = job_key(base, id)
    local r = read(jk, 'state', 'priority', 'seq')
    due[#due + 1] = id
    order[#order + 1] = {id = id, jk = jk, r = r, at = tonumber(found[i + 1]),
                         seq = (r and tonumber(r[3])) or 0}
  end
  table.sort(order, function(a, b)
    if a.at ~= b.at then
      return a.at < b.at
    end
    return a.seq < b.seq
  end)
  return due, order
end

-- Promote up to `max` due delayed jobs of one queue into waiting, in run-time order.
local function promote(base, now, max)
  local dkey = base .. ':delayed'
  local due, order = due_jobs(base, now, max)
  if #due == 0 then
    return 0
  end
  local moved = 0
  for _, o in ipairs(order) do
    local id, jk, r = o.id, o.jk, o.r
    if r and r[1] == 'delayed' and tonumber(r[2]) then
      make_waiting(base, jk, id, tonumber(r[2]), nil)
      moved = moved + 1
    else
      local why = r == nil and NOT_A_HASH or state_problem(r[1])
      if why or r[1] == 'delayed' then
        quarantine(base, jk, id, 'delayed', fmt(now), why or "priority is not a number")
      end
    end
  end
  redis.call('ZREM', dkey, unpack(due))
  return moved
end


-- The meta store (meta_*.lua; relaymq.backends.meta): a record is a hash with `value`,
-- `version` (HINCRBY on every write) and `expires` ('' = never), and its key is a member of
-- the meta index. The version of the record when it is live at `now`, else nil.
local function meta_live(record, now)
  local m = redis.call('HMGET', record, 'version', 'expires')
  if not m[1] or (m[2] and m[2] ~= '' and tonumber(m[2]) <= now) then
    return nil
  end
  return m[1]
end

-- Write a meta record with a new version; `ttl` '' never lapses, `expire_ms` '' keeps the
-- hash for good (else its own expiry, a clean-up only: `expires` decides the lapse).
local function meta_write(index, record, now, key, value, ttl, expire_ms)
  local expires = ''
  if ttl ~= '' then
    expires = fmt(now + tonumber(ttl))
  end
  redis.call('HINCRBY', record, 'version', 1)
  redis.call('HSET', record, 'value', value, 'expires', expires)
  redis.call('ZADD', index, 0, key)
  if expire_ms ~= '' then
    redis.call('PEXPIRE', record, expire_ms)
  else
    redis.call('PERSIST', record)
  end
end
