#!lua flags=allow-oom
-- KEYS: the cell. ARGV: '1' and the value it must hold, or '0' and '' (absent);
-- '1' and the new value, or '0' and '' (delete). Returns 1 when written, 0 when the
-- cell held something else.
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '0' then
  if cur then return 0 end
elseif cur ~= ARGV[2] then
  return 0
end
if ARGV[3] == '0' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[4])
end
return 1
