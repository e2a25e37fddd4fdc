-- page.lua: one page of a state set with the records, in one round trip.
-- KEYS[1]  base of the queue
-- ARGV[1]  state (the suffix of its set)
-- ARGV[2]  offset
-- ARGV[3]  limit
-- Returns  {id1, job1, id2, job2, ...} in score order (waiting: claim order; delayed: run
--          time; others: oldest first); job = the values in FIELDS order (lib.lua), or 0
--          for an unreadable record.
local base = KEYS[1]
local offset, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local ids = redis.call('ZRANGE', base .. ':' .. ARGV[1], offset, offset + limit - 1)
local out = {}
for _, id in ipairs(ids) do
  local r = read(job_key(base, id), unpack(FIELDS)) or 0
  out[#out + 1] = id
  out[#out + 1] = r
end
return out
