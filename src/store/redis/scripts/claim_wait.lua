
local prev = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'GET', 'PX', ARGV[2])
if prev and string.sub(prev, 1, 2) == 'd|' then
  redis.call('SET', KEYS[1], prev, 'KEEPTTL')
end
return prev