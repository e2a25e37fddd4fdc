-- register_worker.lua: record or renew a worker in the registry (global slot).
-- KEYS[1]  the workers zset; KEYS[2] the worker's hash
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  worker id
-- ARGV[3]  ttl (s): listed until now + ttl
-- ARGV[4]  info (JSON)
-- ARGV[5]  key expiry (ms) for clean-up
-- Returns  1.
local now, nows = clock(ARGV[1])
redis.call('HSET', KEYS[2], 'info', ARGV[4], 'seen_at', nows)
redis.call('PEXPIRE', KEYS[2], ARGV[5])
redis.call('ZADD', KEYS[1], fmt(now + tonumber(ARGV[3])), ARGV[2])
return 1
