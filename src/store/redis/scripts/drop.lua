#!lua flags=allow-oom
if redis.call('HGET', KEYS[1], 'lease') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'lease', 'until')
end
redis.call('XACK', KEYS[2], 'hookgate', ARGV[2])
redis.call('XDEL', KEYS[2], ARGV[2])
return 1