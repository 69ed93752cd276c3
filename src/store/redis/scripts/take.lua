#!lua flags=allow-oom
local stream, delayed = KEYS[1], KEYS[2]
local now = clock(KEYS[3])
local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, tonumber(ARGV[7]))
for _, id in ipairs(due) do
  redis.call('ZREM', delayed, id)
  redis.call('XADD', stream, '*', 'id', id)
end
local max, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local out, leased = {}, 0
-- true: leased; false: drop the entry; nil: a live lease holds it, leave it pending.
local function take(eid, fields)
  local evid = nil
  if type(fields) == 'table' then
    for i = 1, #fields, 2 do
      if fields[i] == 'id' then evid = fields[i + 1] end
    end
  end
  if not evid then return false end
  local key = ARGV[6] .. evid
  local h = redis.call('HMGET', key, 'env', 'body', 'status', 'lease', 'okey', 'until')
  if not h[3] then return false end
  local ok, st = pcall(cjson.decode, h[3])
  if not ok or type(st) ~= 'table' then
    out[#out + 1] = {'corrupt', key}
    return false
  end
  if h[5] and redis.call('LINDEX', h[5], 0) ~= evid then
    -- Waits behind another event of its key (an entry that should not exist): it
    -- enters the stream again when its turn comes.
    return false
  end
  if st.state ~= 'queued' and st.state ~= 'retrying' then return false end
  local holder = h[4] and string.match(h[4], '^([^:]+):')
  if holder and holder ~= eid then
    -- Leased through another entry: this one is a stray copy, unless that entry is
    -- gone from the pending list.
    if #redis.call('XPENDING', stream, 'hookgate', holder, holder, 1) > 0 then return false end
  elseif holder and (tonumber(h[6]) or 0) > now then
    return nil
  end
  local token = eid .. ':' .. ARGV[5]
  redis.call('HSET', key, 'lease', token, 'until', now + lease)
  out[#out + 1] = {token, key, h[1], h[2], h[3]}
  leased = leased + 1
  return true
end
local function settle(eid, fields)
  if take(eid, fields) == false then
    redis.call('XACK', stream, 'hookgate', eid)
    redis.call('XDEL', stream, eid)
  end
end
local claimed = redis.pcall('XAUTOCLAIM', stream, 'hookgate', ARGV[3], ARGV[8], ARGV[4], 'COUNT', max)
if type(claimed) == 'table' and claimed.err then
  if string.find(claimed.err, 'NOGROUP', 1, true) then
    redis.call('XGROUP', 'CREATE', stream, 'hookgate', '0', 'MKSTREAM')
    claimed = redis.call('XAUTOCLAIM', stream, 'hookgate', ARGV[3], ARGV[8], '0-0', 'COUNT', max)
  else
    return redis.error_reply(claimed.err)
  end
end
for _, e in ipairs(claimed[2]) do
  if e then settle(e[1], e[2]) end
end
if leased < max then
  local r = redis.call('XREADGROUP', 'GROUP', 'hookgate', ARGV[3], 'COUNT', max - leased, 'STREAMS', stream, '>')
  if r and r[1] then
    for _, e in ipairs(r[1][2]) do
      if e then settle(e[1], e[2]) end
    end
  end
end
return {claimed[1], out}