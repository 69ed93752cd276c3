#!lua flags=allow-oom
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return 0 end
local ok, s = pcall(cjson.decode, st)
if ok and type(s) == 'table' and s.state == 'delivered' then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 1
end
return 0