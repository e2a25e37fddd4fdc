-- purge.lua: delete a chunk of jobs of one state (drain, clean, obliterate).
-- KEYS[1]  base of the queue
-- ARGV[1]  state (the suffix of its set)
-- ARGV[2]  older_than (s): only jobs scored below now - older_than; '' = any
-- ARGV[3]  now ('' = server TIME)
-- ARGV[4]  most jobs deleted in this call (the caller loops while a full chunk comes back)
-- Returns  the number of jobs deleted. The jobs blocked on them are told nothing: drain and
-- obliterate delete those too, and a finished job has told them already. A job of a sequence
-- leaves it.
local base = KEYS[1]
local key = base .. ':' .. ARGV[1]
local chunk = tonumber(ARGV[4])
local ids
if ARGV[2] == '' then
  ids = redis.call('ZRANGE', key, 0, chunk - 1)
else
  local now = clock(ARGV[3])
  ids = redis.call('ZRANGEBYSCORE', key, '-inf', '(' .. fmt(now - tonumber(ARGV[2])), 'LIMIT', 0, chunk)
end
if #ids == 0 then
  return 0
end
if redis.call('EXISTS', base .. ':seqs') == 1 then -- the jobs of sequences leave them
  for _, id in ipairs(ids) do
    local name = redis.pcall('HGET', job_key(base, id), 'sequence')
    sequence_ended(base, id, name, nil, nil)
  end
end
local jobs = {}
for i, id in ipairs(ids) do
  jobs[2 * i - 1] = job_key(base, id)
  jobs[2 * i] = base .. ':deps:' .. id
end
redis.call('DEL', unpack(jobs))
redis.call('ZREM', key, unpack(ids))
if ARGV[1] == 'waiting' then
  left_line(base)
end
return #ids
