-- meta_delete.lua: delete a meta record (MetaStore.meta_delete).
-- KEYS[1]  the meta index
-- KEYS[2]  the record's hash
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  key
-- Returns  1 when a live record was deleted, 0 when there was none (or it had lapsed).
local now = clock(ARGV[1])
local live = meta_live(KEYS[2], now)
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[1], ARGV[2])
if live then
  return 1
end
return 0
