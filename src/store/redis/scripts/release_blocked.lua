#!lua flags=allow-oom
local n = 0
for i = 3, #KEYS do
  local j = (i - 3) * 3 + 1
  local id, old, new = ARGV[j + 1], ARGV[j + 2], ARGV[j + 3]
  if redis.call('HGET', KEYS[i], 'status') == old then
    redis.call('HSET', KEYS[i], 'status', new)
    leave_line(KEYS[i], id, KEYS[1], KEYS[2], ARGV[1])
    n = n + 1
  end
end
return n