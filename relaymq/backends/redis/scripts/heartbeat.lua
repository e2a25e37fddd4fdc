-- heartbeat.lua: renew the claims of one queue, fenced by state and token.
-- KEYS[1]  base of the queue
-- ARGV[1]  now ('' = server TIME)
-- ARGV[2..] 2 per beat: "<token> <id>", progress ('' = unchanged, '=' .. bytes = store)
-- Returns  one integer per beat: 1 = held (heartbeat_at = now, active score = now),
--          0 = lost, 2 = lost because an operator cancelled it (same token).
local base = KEYS[1]
local now, nows = clock(ARGV[1])
local akey = base .. ':active'
local out = {}
for i = 2, #ARGV, 2 do
  local token, id = string.match(ARGV[i], '^(%d+) (.*)$')
  local jk = job_key(base, id or '')
  local r = id and read(jk, 'state', 'token', 'cancel_requested')
  local answer = 0
  if r and r[2] == token then
    if r[1] == 'active' then
      answer = 1
      redis.call('HSET', jk, 'heartbeat_at', nows)
      redis.call('ZADD', akey, 'XX', nows, id)
      if ARGV[i + 1] ~= '' then
        set_opt(jk, 'progress', ARGV[i + 1])
      end
    elseif r[3] == '1' then
      answer = 2
    end
  end
  out[#out + 1] = answer
end
return out
