-- claim.lua: one atomic claim of up to `limit` jobs across queues, visited in order.
-- KEYS     bases of the queues, in visit order (in cluster mode: one queue per call)
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  worker id
-- ARGV[3]  limit
-- ARGV[4]  most delayed jobs promoted per queue in this call (bounds the script's cost)
-- Returns  {now, k1, id1, job1, k2, id2, job2, ...}: k = index of the job's queue in KEYS,
--          job = the claimed record as HGETALL pairs. Paused queues are skipped; due delayed jobs of
--          each visited queue are promoted first. Each claimed job becomes active with
--          token + 1, attempts + 1, claimed_at = heartbeat_at = now, worker_id.
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
    local akey = base .. ':active'
    local taken = 0
    while remaining > 0 do
      local popped = redis.call('ZPOPMIN', base .. ':waiting', remaining)
      if #popped == 0 then
        break
      end
      for i = 1, #popped, 2 do
        local id = popped[i]
        local jk = job_key(base, id)
        local r = read(jk, 'state', 'token', 'attempts')
        if r and r[1] == 'waiting' and tonumber(r[2] or '0') and tonumber(r[3] or '0') then
          redis.call('HSET', jk, 'state', 'active', 'token', tonumber(r[2] or '0') + 1,
            'attempts', tonumber(r[3] or '0') + 1, 'claimed_at', nows, 'heartbeat_at', nows,
            'worker_id', worker)
          redis.call('ZADD', akey, nows, id)
          out[#out + 1] = k
          out[#out + 1] = id
          out[#out + 1] = redis.call('HGETALL', jk)
          remaining = remaining - 1
          taken = taken + 1
        elseif r == nil or r[1] == 'waiting' then
          quarantine(base, jk, id, 'waiting', nows)
        end
      end
    end
    -- Promoted more than this worker takes: wake the others.
    wake(base, promoted - taken)
  end
end
return out
