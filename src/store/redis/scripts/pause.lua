#!lua flags=allow-oom
local now = clock(KEYS[2])
local untl = now + tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if untl > cur then redis.call('SET', KEYS[1], untl, 'PX', ARGV[1]) end
return 0