#!lua flags=allow-oom
local old, new = ARGV[1], ARGV[2]
local moved = 0
local function kind(k) return redis.call('TYPE', k).ok end
if kind(old .. 'ids') == 'zset' then
  moved = moved + 1
  if redis.call('EXISTS', new .. 'ids') == 0 then
    redis.call('RENAME', old .. 'ids', new .. 'ids')
  else
    redis.call('ZUNIONSTORE', new .. 'ids', 2, new .. 'ids', old .. 'ids')
    redis.call('DEL', old .. 'ids')
  end
end
for _, s in ipairs({'rec', 'counts'}) do
  local o, d = old .. s, new .. s
  if kind(o) == 'hash' then
    moved = moved + 1
    if redis.call('EXISTS', d) == 0 then
      redis.call('RENAME', o, d)
    else
      local cursor = '0'
      repeat
        local r = redis.call('HSCAN', o, cursor, 'COUNT', 1000)
        cursor = r[1]
        local kv = r[2]
        for i = 1, #kv, 2 do
          if s == 'rec' then
            redis.call('HSETNX', d, kv[i], kv[i + 1])
          else
            redis.call('HINCRBY', d, kv[i], tonumber(kv[i + 1]) or 0)
          end
        end
      until cursor == '0'
      redis.call('DEL', o)
    end
  end
end
local ob, nb = old .. 'bytes', new .. 'bytes'
if kind(ob) == 'string' then
  local v = tonumber(redis.call('GET', ob))
  if v then
    moved = moved + 1
    if redis.call('EXISTS', nb) == 0 then
      redis.call('RENAME', ob, nb)
    else
      redis.call('INCRBY', nb, v)
      redis.call('DEL', ob)
    end
  end
end
return moved
