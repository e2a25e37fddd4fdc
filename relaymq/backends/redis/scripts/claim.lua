-- claim.lua: one atomic claim of up to `limit` jobs across queues, visited in order.
-- KEYS     bases of the queues, in visit order (in cluster mode: one queue per call)
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  worker id
-- ARGV[3]  limit
-- ARGV[4]  most delayed jobs promoted per queue in this call (bounds the script's cost)
-- Returns  {now, k1, id1, job1, k2, id2, job2, ...}: k = index of the job's queue in KEYS,
--          job = the record as HGETALL pairs as it was BEFORE the claim; the claim itself set
--          state = active, token + 1, attempts + 1, claimed_at = heartbeat_at = now and
--          worker_id, which the caller applies to the returned record (saves a read-back).
-- Paused queues are skipped; due delayed jobs of each visited queue are promoted first.
-- A record that cannot be read is moved to the DLQ (failed) and not returned.
local now, nows = clock(ARGV[1])
local worker = ARGV[2]
local remaining = tonumber(ARGV[3])
local promote_max = tonumber(ARGV[4])
local out = {nows}
for k, base in ipairs(KEYS) do
  if remaining <= 0 then
    break
  end
  if redis.call('EXISTS', base .. ':paused') == 0 then
    local promoted = promote(base, now, promote_max)
    local active = {}
    while remaining > 0 do
      local popped = redis.call('ZPOPMIN', base .. ':waiting', remaining)
      if #popped == 0 then
        break
      end
      for i = 1, #popped, 2 do
        local id = popped[i]
        local jk = job_key(base, id)
        local rec = redis.pcall('HGETALL', jk)
        local state, token, attempts = nil, '0', '0'
        if type(rec) == 'table' and not rec.err then
          for j = 1, #rec, 2 do
            local f = rec[j]
            if f == 'state' then
              state = rec[j + 1]
            elseif f == 'token' then
              token = rec[j + 1]
            elseif f == 'attempts' then
              attempts = rec[j + 1]
            end
          end
          token, attempts = tonumber(token), tonumber(attempts)
        else
          rec = nil
        end
        if state == 'waiting' and token and attempts then
          redis.call('HSET', jk, 'state', 'active', 'token', token + 1, 'attempts', attempts + 1,
            'claimed_at', nows, 'heartbeat_at', nows, 'worker_id', worker)
          active[#active + 1] = nows
          active[#active + 1] = id
          out[#out + 1] = k
          out[#out + 1] = id
          out[#out + 1] = rec
          remaining = remaining - 1
        elseif rec == nil or state == 'waiting' then
          quarantine(base, jk, id, 'waiting', nows)
        end
        -- else: no record (removed) or a stray entry; popping it was all there was to do
      end
    end
    if #active > 0 then
      redis.call('ZADD', base .. ':active', unpack(active))
    end
    -- Promoted more than this worker takes: wake the others.
    wake(base, promoted - #active / 2)
  end
end
return out
