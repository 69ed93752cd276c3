
local function leave_line(ev, id, stream, delayed, ev_prefix)
  local line = redis.call('HGET', ev, 'okey')
  if not line then return end
  redis.call('HDEL', ev, 'okey')
  local first = redis.call('LINDEX', line, 0)
  redis.call('LREM', line, 0, id)
  if first ~= id then return end
  local nxt = redis.call('LINDEX', line, 0)
  while nxt do
    local h = redis.call('HMGET', ev_prefix .. nxt, 'status', 'lease')
    if h[1] then
      local ok, st = pcall(cjson.decode, h[1])
      -- An unreadable next event goes into the stream all the same: the take sets it
      -- aside and reports it, rather than the line waiting silently.
      local waiting = not ok or type(st) ~= 'table' or st.state == 'queued' or st.state == 'retrying'
      if waiting and not h[2] and not redis.call('ZSCORE', delayed, nxt) then
        redis.call('XADD', stream, '*', 'id', nxt)
      end
      return
    end
    redis.call('LPOP', line)
    nxt = redis.call('LINDEX', line, 0)
  end
end
