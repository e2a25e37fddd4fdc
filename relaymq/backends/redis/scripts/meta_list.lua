-- meta_list.lua: the live meta records whose key starts with a prefix (MetaStore.meta_list);
-- lapsed ones met on the way are deleted.
-- KEYS[1]  the meta index
-- KEYS[2]  the prefix of record hashes ("<prefix>:{<prefix>:meta}:r:"), same slot
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  the key prefix
-- Returns  {key, value, version, expires ('' = never), ...} by key.
local now = clock(ARGV[1])
local out = {}
local keys = redis.call('ZRANGEBYLEX', KEYS[1], '[' .. ARGV[2], '(' .. ARGV[2] .. '\255')
for _, key in ipairs(keys) do
  local record = KEYS[2] .. key
  if meta_live(record, now) then
    local m = redis.call('HMGET', record, 'value', 'version', 'expires')
    out[#out + 1] = key
    out[#out + 1] = m[1]
    out[#out + 1] = m[2]
    out[#out + 1] = m[3]
  else
    redis.call('DEL', record)
    redis.call('ZREM', KEYS[1], key)
  end
end
return out
