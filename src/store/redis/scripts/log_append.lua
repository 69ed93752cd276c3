
local share = tonumber(ARGV[1])
local floor = tonumber(ARGV[2])
local old_minute = tonumber(ARGV[3])
local overhead = tonumber(ARGV[4])
local n = tonumber(ARGV[5])
local old_ten = ARGV[6]
local bytes = tonumber(redis.call('GET', KEYS[3]) or '0')
local i = 7
-- The records go in with one ZADD and one HSET (a batch holds a few dozen at most).
local scored, fields = {}, {}
for _ = 1, n do
  local id, rec = ARGV[i], ARGV[i + 1]
  local old = redis.call('HSTRLEN', KEYS[2], id)
  if old > 0 then bytes = bytes - old - overhead end
  scored[#scored + 1] = 0
  scored[#scored + 1] = id
  fields[#fields + 1] = id
  fields[#fields + 1] = rec
  bytes = bytes + #rec + overhead
  i = i + 2
end
if n > 0 then
  redis.call('ZADD', KEYS[1], unpack(scored))
  redis.call('HSET', KEYS[2], unpack(fields))
end
-- The oldest go, 64 at a time, each batch with one HDEL and one ZREM.
while true do
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 63)
  if #oldest == 0 then bytes = 0 break end
  local drop = {}
  for _, id in ipairs(oldest) do
    -- The ID's first 12 hex digits are its time (ms): compared as a number, not by
    -- the server's collation.
    if bytes <= share and tonumber(string.sub(id, 1, 12), 16) >= floor then break end
    bytes = bytes - redis.call('HSTRLEN', KEYS[2], id) - overhead
    drop[#drop + 1] = id
  end
  if #drop > 0 then
    redis.call('HDEL', KEYS[2], unpack(drop))
    redis.call('ZREM', KEYS[1], unpack(drop))
  end
  if #drop < #oldest then break end
end
if bytes < 0 then bytes = 0 end
redis.call('SET', KEYS[3], bytes)
local counted = false
while i <= #ARGV do
  local by = tonumber(ARGV[i + 1])
  redis.call('HINCRBY', KEYS[4], ARGV[i], by)
  -- The same count in its ten-minute bucket (the day's chart).
  local m, outcome = string.match(ARGV[i], '^(%d+)|(.*)$')
  if m then
    redis.call('HINCRBY', KEYS[5], math.floor(tonumber(m) / 10) .. '|' .. outcome, by)
  end
  counted = true
  i = i + 2
end
-- Ten-minute buckets older than a day go once per bucket, not at every write: the
-- field '#floor' says where the last sweep stood.
if counted and redis.call('HGET', KEYS[5], '#floor') ~= old_ten then
  local floor_ten = tonumber(old_ten)
  for _, f in ipairs(redis.call('HKEYS', KEYS[5])) do
    local m = tonumber(string.match(f, '^(%d+)|'))
    if f ~= '#floor' and (m == nil or m < floor_ten) then redis.call('HDEL', KEYS[5], f) end
  end
  redis.call('HSET', KEYS[5], '#floor', old_ten)
end
if counted or redis.call('HLEN', KEYS[4]) > 0 then
  for _, f in ipairs(redis.call('HKEYS', KEYS[4])) do
    local m = tonumber(string.match(f, '^(%d+)|'))
    if m == nil or m < old_minute then redis.call('HDEL', KEYS[4], f) end
  end
end
return bytes
