-- meta_get.lua: read one meta record (relaymq.backends.meta.MetaStore.meta_get).
-- KEYS[1]  the record's hash ("<prefix>:{<prefix>:meta}:r:<key>"): value, version, expires
-- ARGV[1]  now ('' = server TIME)
-- Returns  {value, version, expires ('' = never)}, or nil when absent or lapsed.
local now = clock(ARGV[1])
if not meta_live(KEYS[1], now) then
  return false
end
return redis.call('HMGET', KEYS[1], 'value', 'version', 'expires')
