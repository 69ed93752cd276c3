
local n = tonumber(ARGV[6])
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    local fp = redis.call('HGET', KEYS[i], 'fp')
    if fp then
      if ARGV[7] == '1' then redis.call('HSET', KEYS[i], 'fp', fp) end
      return fp
    end
    return -i
  end
end
local id, k = ARGV[4], n + 1
for j = 8, #ARGV, 2 do
  local ev, stream, all = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  k = k + 3
  redis.call('HSET', ev, 'env', ARGV[1], 'body', ARGV[2], 'fp', ARGV[3], 'status', ARGV[j])
  redis.call('ZADD', all, ARGV[5], id)
  if ARGV[j + 1] == '1' then
    local line = KEYS[k]
    k = k + 1
    redis.call('HSET', ev, 'okey', line)
    -- Only the first of its line is due; the others wait for their turn.
    if redis.call('RPUSH', line, id) == 1 then
      redis.call('XADD', stream, '*', 'id', id)
    end
  else
    redis.call('XADD', stream, '*', 'id', id)
  end
end
return 0