#!lua flags=allow-oom
local pending = redis.call('XPENDING', KEYS[1], 'hookgate', '-', '+', tonumber(ARGV[4]), ARGV[1])
local n = 0
for _, p in ipairs(pending) do
  local eid = p[1]
  local e = redis.call('XRANGE', KEYS[1], eid, eid)
  local evid = nil
  if e[1] and type(e[1][2]) == 'table' then
    local fields = e[1][2]
    for i = 1, #fields, 2 do
      if fields[i] == 'id' then evid = fields[i + 1] end
    end
  end
  if evid then
    local key = ARGV[3] .. evid
    if redis.call('HGET', key, 'lease') == eid .. ':' .. ARGV[2] then
      redis.call('HDEL', key, 'lease', 'until')
      redis.call('XACK', KEYS[1], 'hookgate', eid)
      redis.call('XDEL', KEYS[1], eid)
      redis.call('XADD', KEYS[1], '*', 'id', evid)
      n = n + 1
    end
  end
end
return n