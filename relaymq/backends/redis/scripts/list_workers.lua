-- list_workers.lua: workers whose registration has not lapsed; lapsed ones are dropped.
-- KEYS[1]  the workers zset
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  key prefix of the workers' hashes (same slot as KEYS[1])
-- Returns  {info1, seen_at1, info2, seen_at2, ...}
local now = clock(ARGV[1])
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', fmt(now))
for _, id in ipairs(lapsed) do
  redis.call('DEL', ARGV[2] .. id)
end
if #lapsed > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', fmt(now))
end
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. fmt(now), '+inf')) do
  local r = redis.call('HMGET', ARGV[2] .. id, 'info', 'seen_at')
  if r[1] then
    out[#out + 1] = r[1]
    out[#out + 1] = r[2]
  end
end
return out
