-- unlock.lua: give up a lease if the caller holds it.
-- KEYS[1]  the lock key
-- ARGV[1]  owner
-- Returns  1 when the lease was released, 0 when someone else (or nobody) held it.
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
