-- claim.lua: one atomic claim of up to `limit` jobs across queues, visited in order.
-- KEYS     bases of the queues, in visit order (in cluster mode: one queue per call)
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  worker id
-- ARGV[3]  limit
-- ARGV[4]  most delayed jobs promoted per queue in this call (bounds the script's cost)
-- Returns  {now, limited, k1, id1, token1, job1, k2, ...}: limited = {k, retry, ...} for each
--          queue whose limits held the claim back (retry: seconds until its rate window
--          ends, '' while it waits for active jobs); k = index of the job's queue in KEYS,
--          token = the claim's token, job = the record AS READ BEFORE THE CLAIM, as HGETALL
--          field/value pairs (absent fields are not listed; HGETALL is about half the cost
--          of an HMGET of every field, and the reply is shorter).
-- Each claimed job becomes active with token + 1, attempts + 1, claimed_at = heartbeat_at =
-- now and worker_id; the caller applies exactly these changes to the record it got back.
-- Paused queues are skipped; due delayed jobs of each visited queue are promoted first. A
-- queue with limits gives at most its allowance (lib.lua), and counts its starts; with a
-- per-key rate or cap, jobs whose key used its window or is at its cap are passed over and
-- keep their place. So are jobs of a sequence that may not start yet (lib.lua sequence_free:
-- not the first of their sequence that holds its place, or one of it is active); a queue
-- whose claim came back short with such jobs passed over is in `limited` with retry ''.
-- A record that cannot be read, or in a state nobody knows, is moved to the DLQ (failed) with
-- the reason and not returned (lib.lua quarantine).
local now, nows = clock(ARGV[1])
local worker = ARGV[2]
local remaining = tonumber(ARGV[3])
local promote_max = tonumber(ARGV[4])
local limited = {}
local out = {nows, limited}

-- Claim job id (already out of the waiting set) for the queue at KEYS[k]: true when it is
-- now active and in the reply.
local function activate(k, base, id, active)
  local jk = job_key(base, id)
  local r = redis.pcall('HGETALL', jk)
  local state, token, attempts
  if type(r) == 'table' and not r.err then
    for j = 1, #r, 2 do
      local f = r[j]
      if f == 'state' then
        state = r[j + 1]
      elseif f == 'token' then
        token = r[j + 1]
      elseif f == 'attempts' then
        attempts = r[j + 1]
      end
    end
    token, attempts = tonumber(token or '0'), tonumber(attempts or '0')
  else
    r = nil
  end
  if state == 'waiting' and token and attempts then
    redis.call('HSET', jk, 'state', 'active', 'token', token + 1, 'attempts', attempts + 1,
      'claimed_at', nows, 'heartbeat_at', nows, 'worker_id', worker)
    active[#active + 1] = nows
    active[#active + 1] = id
    out[#out + 1] = k
    out[#out + 1] = id
    out[#out + 1] = token + 1
    out[#out + 1] = r
    return true
  else
    local why = r == nil and NOT_A_HASH or state_problem(state)
    if why or state == 'waiting' then
      quarantine(base, jk, id, 'waiting', nows, why or "token or attempts is not a number")
    end
  end
  -- else: no record (removed) or a stray entry; taking it out was all there was to do
  return false
end

for k, base in ipairs(KEYS) do
  if remaining <= 0 then
    break
  end
  if redis.call('EXISTS', base .. ':paused') == 0 then
    local promoted = promote(base, now, promote_max)
    local active = {}
    local quota, window, used, retry, keys = allowance(base, now, remaining)
    local limits = quota ~= nil
    quota = quota or remaining
    local sequences = redis.call('EXISTS', base .. ':seqs') == 1
    if keys or sequences then
      -- Per-key limits, sequences: look down the line (KEY_SCAN at most) past keys that used
      -- their window or are at their cap, and past jobs that are not their sequence's head
      -- or whose sequence has an active job (a key refuses first, as KeyBudget.refuses).
      -- With fairness, once the line gives nothing more, a new round looks once again.
      local seen = {} -- per sequence: its job that may start, or false (sequence_free)
      local passed = {} -- ids of jobs of a sequence passed over (and not taken since)
      repeat
        local skipped, scanned = 0, 0
        -- With fairness, the jobs at the front of the line that claims of this round passed
        -- over only because their key had had its turn stay passed over until the round ends:
        -- they are not read again while nothing joined the line ahead of them (then as many
        -- jobs score up to the last of them) and none left it but by a claim (left_line).
        local front = keys and keys.fair
        if front and keys.skip > 0 then
          local ahead = redis.call('ZCOUNT', base .. ':waiting', '-inf', keys.skip_score or '-inf')
          if ahead == keys.skip then
            skipped = keys.skip
          else
            keys.skip = 0
          end
        end
        while quota > 0 and scanned < KEY_SCAN do
          local ids = redis.call('ZRANGE', base .. ':waiting', skipped, skipped + 99)
          if #ids == 0 then
            break
          end
          for _, id in ipairs(ids) do
            if quota <= 0 then
              break
            end
            scanned = scanned + 1
            local r = read(job_key(base, id), 'limit_key', 'sequence')
            local key, name = r and r[1], r and r[2]
            local take, turned = true, false
            if keys and key_refuses(keys, key) then
              take = false
            elseif type(name) == 'string' and not sequence_free(base, id, name, seen) then
              take = false
            elseif keys then
              take, turned = key_take(keys, key)
            end
            if front and not take and turned then
              keys.skip, keys.skip_last = skipped + 1, id -- still the front: passed over
            else
              front = false
            end
            if take then
              redis.call('ZREM', base .. ':waiting', id)
              passed[id] = nil
              if activate(k, base, id, active) then
                remaining, quota = remaining - 1, quota - 1
                if type(name) == 'string' then
                  seen[name] = false -- now it has an active job
                  redis.call('HSET', base .. ':seq_run', name, id)
                end
              elseif type(name) == 'string' then
                seen[name] = nil -- quarantined: read its sequence again
              end
            else
              skipped = skipped + 1
              if type(name) == 'string' then
                passed[id] = true
              end
            end
          end
        end
      until quota <= 0 or not keys or not next_round(keys)
      if keys then
        key_count(base, keys)
        if keys.held and quota > 0 then
          limited[#limited + 1] = k
          limited[#limited + 1] = key_retry(keys)
        end
      end
      if quota > 0 and next(passed) ~= nil and not (keys and keys.held) then
        limited[#limited + 1] = k -- sequences held the rest back, until their jobs end
        limited[#limited + 1] = ''
      end
    end
    while quota > 0 and not keys and not sequences do
      local popped = redis.call('ZPOPMIN', base .. ':waiting', quota)
      if #popped == 0 then
        break
      end
      for i = 1, #popped, 2 do
        if activate(k, base, popped[i], active) then
          remaining, quota = remaining - 1, quota - 1
        end
      end
    end
    if #active > 0 then
      redis.call('ZADD', base .. ':active', unpack(active))
    end
    if limits then
      count_starts(base, window, used + #active / 2)
      if quota == 0 and remaining > 0 then -- took its whole allowance, and was asked more
        limited[#limited + 1] = k
        limited[#limited + 1] = retry
      end
    end
    -- Promoted more than this worker takes: wake the others.
    wake(base, promoted - #active / 2)
  end
end
return out
