-- wait_check.lua: what an idle worker needs to know before it blocks.
-- KEYS     bases of the queues
-- ARGV[1]  now ('' = server TIME)
-- Returns  'ready' when an unpaused queue has a waiting job; else the seconds until the
--          first delayed job of an unpaused queue is due (may be <= 0); else 'idle'.
local now = clock(ARGV[1])
local soonest = nil
for _, base in ipairs(KEYS) do
  if redis.call('EXISTS', base .. ':paused') == 0 then
    if redis.call('ZCARD', base .. ':waiting') > 0 then
      return 'ready'
    end
    local first = redis.call('ZRANGE', base .. ':delayed', 0, 0, 'WITHSCORES')
    if first[2] then
      local due = tonumber(first[2]) - now
      if soonest == nil or due < soonest then
        soonest = due
      end
    end
  end
end
if soonest == nil then
  return 'idle'
end
return fmt(soonest)
