#!lua flags=allow-oom
local cur = redis.call('HGET', KEYS[1], 'lease')
if cur ~= ARGV[1] then
  local holder = cur and string.match(cur, '^([^:]+):')
  if holder ~= ARGV[2] then
    redis.call('XACK', KEYS[2], 'hookgate', ARGV[2])
    redis.call('XDEL', KEYS[2], ARGV[2])
  end
  return 0
end
redis.call('HSET', KEYS[1], 'status', ARGV[3])
redis.call('HDEL', KEYS[1], 'lease', 'until')
local id = ARGV[8]
if ARGV[12] == '0' then
  leave_line(KEYS[1], id, KEYS[2], KEYS[5], ARGV[13])
end
if ARGV[4] == 'delivered' then
  redis.call('HDEL', KEYS[1], 'body')
  redis.call('HSET', KEYS[1], 'env', ARGV[11])
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
  redis.call('ZREM', KEYS[5], id)
  redis.call('ZADD', KEYS[6], ARGV[6], id)
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', ARGV[10])
elseif ARGV[4] == 'retry' then
  redis.call('ZADD', KEYS[5], clock(KEYS[7]) + tonumber(ARGV[7]), id)
else
  redis.call('ZADD', KEYS[4], ARGV[9], id)
end
redis.call('XACK', KEYS[2], 'hookgate', ARGV[2])
redis.call('XDEL', KEYS[2], ARGV[2])
return 1