-- prune_keys.lua: forget a queue's keys that hold nothing any more (Backend.prune_keys).
-- KEYS[1]  base of the queue
-- ARGV[1]  now ('' = server TIME), ARGV[2] older_than seconds, ARGV[3] skip (keys past the
--          cutoff that an earlier call kept), ARGV[4] most keys to examine
-- Returns  {forgotten, examined}: keys whose window (base:key_until, a zset by its end) ended
--          before now - older_than and whose job is no longer waiting, delayed or active.
local base = KEYS[1]
local now = clock(ARGV[1])
local cutoff = now - tonumber(ARGV[2])
local PENDING = {waiting = true, delayed = true, active = true}
local keys, untils = base .. ':keys', base .. ':key_until'
local candidates = redis.call('ZRANGEBYSCORE', untils, '-inf', '(' .. fmt(cutoff), 'LIMIT',
  tonumber(ARGV[3]), tonumber(ARGV[4]))
local forgotten = 0
for _, key in ipairs(candidates) do
  local holder = redis.call('HGET', keys, key)
  local r = holder and read(job_key(base, holder), 'state')
  if not (r and PENDING[r[1]]) then
    redis.call('HDEL', keys, key)
    redis.call('ZREM', untils, key)
    forgotten = forgotten + 1
  end
end
return {forgotten, #candidates}
