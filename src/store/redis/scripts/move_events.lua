#!lua flags=allow-oom
local old, new = ARGV[1], ARGV[2]
local start = tonumber(ARGV[4])
local ids = redis.call('ZRANGE', old .. ARGV[3], start, start + tonumber(ARGV[5]) - 1)
local function rebase(k)
  if string.sub(k, 1, #old) == old then return new .. string.sub(k, #old + 1) end
  return nil
end
local function move_line(o)
  local d = rebase(o)
  if d == nil or redis.call('TYPE', o).ok ~= 'list' then return end
  if redis.call('EXISTS', d) == 0 then redis.call('RENAME', o, d) return end
  -- Both: the old line's IDs were accepted first.
  local items = redis.call('LRANGE', o, 0, -1)
  for i = #items, 1, -1 do redis.call('LPUSH', d, items[i]) end
  redis.call('DEL', o)
end
for _, id in ipairs(ids) do
  local o, d = old .. 'ev:' .. id, new .. 'ev:' .. id
  if redis.call('TYPE', o).ok == 'hash' then
    local okey = redis.call('HGET', o, 'okey')
    if redis.call('EXISTS', d) == 0 then
      redis.call('RENAME', o, d)
      if okey then
        local moved = rebase(okey)
        if moved then redis.call('HSET', d, 'okey', moved) end
      end
    else
      redis.call('DEL', o)
    end
    if okey then move_line(okey) end
  end
end
return #ids
