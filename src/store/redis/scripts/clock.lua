
local function clock(ck)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local c = redis.call('HMGET', ck, 'hi', 'off')
  local hi, off = tonumber(c[1]) or 0, tonumber(c[2]) or 0
  local eff = now + off
  if eff < hi then
    off = off + (hi - eff)
    eff = hi
    redis.call('HSET', ck, 'hi', eff, 'off', off)
  elseif eff - hi >= 1000 then
    redis.call('HSET', ck, 'hi', eff)
  end
  return eff
end
