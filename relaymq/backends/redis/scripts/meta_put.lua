-- meta_put.lua: write a meta record whatever is there (MetaStore.meta_put).
-- KEYS[1]  the meta index (zset of every key, all scores 0, so ZRANGEBYLEX lists a prefix)
-- KEYS[2]  the record's hash ("<prefix>:{<prefix>:meta}:r:<key>")
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  key
-- ARGV[3]  value
-- ARGV[4]  ttl (s), '' = never lapses
-- ARGV[5]  the hash's own expiry (ms) for clean-up, '' = none; `expires` decides the lapse
-- Returns  1
local now = clock(ARGV[1])
meta_write(KEYS[1], KEYS[2], now, ARGV[2], ARGV[3], ARGV[4], ARGV[5])
return 1
