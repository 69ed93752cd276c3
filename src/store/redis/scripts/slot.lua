#!lua flags=allow-oom
local now = clock(KEYS[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local free = tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[1])
local n = math.min(free, tonumber(ARGV[4]))
if n <= 0 then return 0 end
for i = 1, n do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3] .. ':' .. i)
end
redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
return n