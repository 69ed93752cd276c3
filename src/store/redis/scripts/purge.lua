#!lua flags=allow-oom
local purged, dropped = 0, 0
for i = 5, #KEYS do
  local id = ARGV[i - 2]
  local s = redis.call('HGET', KEYS[i], 'status')
  local go = false
  if not s then
    redis.call('ZREM', KEYS[1], id)
    dropped = dropped + redis.call('ZREM', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
  else
    local ok, st = pcall(cjson.decode, s)
    local state = nil
    if ok and type(st) == 'table' then state = st.state end
    if ARGV[1] == 'dead' then
      go = state == 'dead'
      if not go and state ~= nil then
        dropped = dropped + redis.call('ZREM', KEYS[2], id)
      end
    else
      go = state ~= 'delivered'
    end
  end
  if go then
    leave_line(KEYS[i], id, KEYS[4], KEYS[3], ARGV[2])
    redis.call('DEL', KEYS[i])
    redis.call('ZREM', KEYS[1], id)
    dropped = dropped + redis.call('ZREM', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
    purged = purged + 1
  end
end
return {purged, dropped}