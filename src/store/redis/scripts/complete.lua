
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or v == false then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
elseif v == ARGV[2] then
  if ARGV[4] == '1' then redis.call('SET', KEYS[1], v, 'KEEPTTL') end
  return 1
end
return 0