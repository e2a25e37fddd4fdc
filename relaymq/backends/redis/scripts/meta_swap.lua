-- meta_swap.lua: compare and set a meta record (MetaStore.meta_swap).
-- KEYS[1]  the meta index
-- KEYS[2]  the record's hash
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2]  key
-- ARGV[3]  the expected version, '' = only while there is no live record
-- ARGV[4]  value
-- ARGV[5]  ttl (s), '' = never lapses
-- ARGV[6]  the hash's own expiry (ms) for clean-up, '' = none
-- Returns  1 when written, 0 when the live record's version was not the expected one.
local now = clock(ARGV[1])
local live = meta_live(KEYS[2], now)
if ARGV[3] == '' then
  if live then
    return 0
  end
elseif live ~= ARGV[3] then
  return 0
end
meta_write(KEYS[1], KEYS[2], now, ARGV[2], ARGV[4], ARGV[5], ARGV[6])
return 1
