#!lua flags=allow-oom
local out = {}
for i = 5, #KEYS do
  local j = (i - 5) * 4
  local id, old, new, line = ARGV[j + 1], ARGV[j + 2], ARGV[j + 3], ARGV[j + 4]
  local cur = redis.call('HMGET', KEYS[i], 'status', 'lease', 'okey')
  if not cur[1] then
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
    redis.call('ZREM', KEYS[4], id)
    out[#out + 1] = 2
  elseif cur[1] == old and not cur[2] then
    redis.call('HSET', KEYS[i], 'status', new)
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
    if not cur[3] and line ~= '' then
      -- It left its key's line when it died (on_dead = skip): back at the end.
      redis.call('HSET', KEYS[i], 'okey', line)
      if redis.call('RPUSH', line, id) == 1 then
        redis.call('XADD', KEYS[1], '*', 'id', id)
      end
    elseif not cur[3] or redis.call('LINDEX', cur[3], 0) == id then
      redis.call('XADD', KEYS[1], '*', 'id', id)
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out