#!lua flags=allow-oom
if redis.call('HGET', KEYS[1], 'lease') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'lease', 'until')
redis.call('XACK', KEYS[2], 'hookgate', ARGV[2])
redis.call('XDEL', KEYS[2], ARGV[2])
redis.call('XADD', KEYS[2], '*', 'id', ARGV[3])
return 1