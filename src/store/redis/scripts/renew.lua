#!lua flags=allow-oom
if redis.call('HGET', KEYS[1], 'lease') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'until', clock(KEYS[3]) + tonumber(ARGV[4]))
redis.call('XCLAIM', KEYS[2], 'hookgate', ARGV[3], 0, ARGV[2], 'JUSTID')
return 1