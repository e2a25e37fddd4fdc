-- lock.lua: take or renew a lease.
-- KEYS[1]  the lock key ("<prefix>:lock:<name>")
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  owner
-- ARGV[3]  ttl (s)
-- ARGV[4]  key expiry (ms) for clean-up; the lease itself is decided by `until`
-- Returns  1 when owner holds the lease afterwards (until = now + ttl), else 0.
local now = clock(ARGV[1])
local cur = redis.call('HMGET', KEYS[1], 'owner', 'until')
if cur[1] and cur[1] ~= ARGV[2] and (tonumber(cur[2]) or 0) > now then
  return 0
end
redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'until', fmt(now + tonumber(ARGV[3])))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
