-- claim_delivered.lua: claim the jobs a broker delivered, each only with its published token.
-- KEYS[1]  base of the queue
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  worker id
-- ARGV[3..] one per delivery: "<token> <job id>"
-- Returns  {now, paused, claimed, stale, retry}: paused = 1 when the queue is paused (then
--          nothing was looked at: the caller keeps the deliveries); claimed = {id1, job1, ...} with
--          job = the values in FIELDS order (lib.lua); stale = ids whose job is gone, not
--          waiting, unreadable or holds another token; retry = false unless the queue's
--          limits or sequences held back live deliveries (kept by the caller): then the
--          seconds until its rate window ends, or '' while it waits for active jobs.
-- A delivered job of a sequence starts only as its sequence's head (lib.lua sequence_free,
-- checked after its key refuses, as claim.lua does); else it is held back like a key at its cap.
-- A claim is the ordinary one: active, token + 1, attempts + 1, claimed_at = heartbeat_at =
-- now, worker_id; the job leaves the waiting set. A delivered job whose record cannot be read
-- or is in a state nobody knows is moved to the DLQ with the reason (lib.lua quarantine).
local base = KEYS[1]
local now, nows = clock(ARGV[1])
local worker = ARGV[2]
if redis.call('EXISTS', base .. ':paused') == 1 then
  return {nows, 1, {}, {}, false}
end
local quota, window, used, retry, keys = allowance(base, now, #ARGV - 2)
local limits = quota ~= nil
local held_back, limit_held = false, false
local seen = {} -- per sequence: its job that may start, or false (sequence_free)
local claimed, stale, active = {}, {}, {}
for i = 3, #ARGV do
  local token, id = string.match(ARGV[i], '^(%d+) (.*)$')
  local r = id and read(job_key(base, id), unpack(FIELDS))
  local attempts = r and tonumber(r[11] or '0')
  local live = r and r[3] == 'waiting' and (r[12] or '0') == token and attempts
  local name = live and r[27]
  if live and limits and quota <= 0 then
    held_back, limit_held = true, true -- beyond the limits: the caller keeps it
  elseif live and keys and key_refuses(keys, r[25]) then
    held_back, limit_held, retry = true, true, key_retry(keys) -- used its window, or at cap
  elseif live and type(name) == 'string' and not sequence_free(base, id, name, seen) then
    held_back = true -- not its sequence's head yet: the caller keeps it
  elseif live and keys and not key_take(keys, r[25]) then
    held_back, limit_held, retry = true, true, key_retry(keys)
  elseif live then
    quota = (quota or 0) - 1
    local jk = job_key(base, id)
    local next_token = tonumber(token) + 1
    redis.call('ZREM', base .. ':waiting', id)
    redis.call('HSET', jk, 'state', 'active', 'token', next_token, 'attempts', attempts + 1,
      'claimed_at', nows, 'heartbeat_at', nows, 'worker_id', worker)
    r[3], r[11], r[12] = 'active', tostring(attempts + 1), tostring(next_token)
    r[13], r[14], r[15] = nows, nows, worker
    active[#active + 1] = nows
    active[#active + 1] = id
    claimed[#claimed + 1] = id
    claimed[#claimed + 1] = r
    if type(name) == 'string' then
      seen[name] = false -- now it has an active job
      redis.call('HSET', base .. ':seq_run', name, id)
    end
  else
    local why = id and (r == nil and NOT_A_HASH or state_problem(r[3]))
    if why or (r and r[3] == 'waiting' and (r[12] or '0') == token) then
      quarantine(base, job_key(base, id), id, 'waiting', nows, why or "attempts is not a number")
    end
    stale[#stale + 1] = id or ARGV[i]
  end
end
if #active > 0 then
  redis.call('ZADD', base .. ':active', unpack(active))
end
if limits then
  count_starts(base, window, used + #active / 2)
end
if keys then
  key_count(base, keys)
end
if held_back and not limit_held then
  retry = '' -- only sequences held deliveries back: until their active jobs end
end
return {nows, 0, claimed, stale, held_back and retry}
