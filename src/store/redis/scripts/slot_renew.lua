#!lua flags=allow-oom
local untl = clock(KEYS[2]) + tonumber(ARGV[2])
if redis.call('ZADD', KEYS[1], 'XX', 'CH', untl, ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
end
return 0