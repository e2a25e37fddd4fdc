-- claim.lua: one atomic claim of up to `limit` jobs across queues, visited in order.
-- KEYS     bases of the queues, in visit order (in cluster mode: one queue per call)
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  worker id
-- ARGV[3]  limit
-- ARGV[4]  most delayed jobs promoted per queue in this call (bounds the script's cost)
-- Returns  {now, k1, id1, job1, k2, id2, job2, ...}: k = index of the job's queue in KEYS,
--          job = the claimed record's values in FIELDS order (lib.lua), nil where absent.
-- Each claimed job becomes active with token + 1, attempts + 1, claimed_at = heartbeat_at =
-- now and worker_id.
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
        local r = read(jk, unpack(FIELDS))
        local token, attempts
        if r then
          token, attempts = tonumber(r[12] or '0'), tonumber(r[11] or '0')
        end
        if r and r[3] == 'waiting' and token and attempts then
          redis.call('HSET', jk, 'state', 'active', 'token', token + 1, 'attempts', attempts + 1,
            'claimed_at', nows, 'heartbeat_at', nows, 'worker_id', worker)
          r[3], r[11], r[12] = 'active', tostring(attempts + 1), tostring(token + 1)
          r[13], r[14], r[15] = nows, nows, worker
          active[#active + 1] = nows
          active[#active + 1] = id
          out[#out + 1] = k
          out[#out + 1] = id
          out[#out + 1] = r
          remaining = remaining - 1
        elseif r == nil or r[3] == 'waiting' then
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
