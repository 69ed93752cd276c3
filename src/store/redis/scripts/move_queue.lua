#!lua flags=allow-oom
local old, new = ARGV[1], ARGV[2]
local moved = 0
local function move(suffix, kind, merge)
  local o, d = old .. suffix, new .. suffix
  local t = redis.call('TYPE', o).ok
  if t == 'none' or (kind and t ~= kind) then return end
  moved = moved + 1
  if redis.call('EXISTS', d) == 0 then redis.call('RENAME', o, d) return end
  if merge == 'zset' then
    redis.call('ZUNIONSTORE', d, 2, d, o, 'AGGREGATE', 'MIN')
  elseif merge == 'stream' then
    for _, e in ipairs(redis.call('XRANGE', o, '-', '+')) do
      redis.call('XADD', d, '*', unpack(e[2]))
    end
  end
  redis.call('DEL', o)
end
move('stream', 'stream', 'stream')
move('delayed', 'zset', 'zset')
move('all', 'zset', 'zset')
move('dead', 'zset', 'zset')
move('delivered', 'zset', 'zset')
move('rate', nil, nil)
move('busy', nil, nil)
move('pause', nil, nil)
move('clock', nil, nil)
return moved
