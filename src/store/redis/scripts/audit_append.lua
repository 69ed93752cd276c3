#!lua
-- KEYS: the audit (a sorted set). ARGV: the record's time (ms), the record, how many
-- records to keep. Adds the record, then drops the oldest beyond the bound. Without
-- `allow-oom`: on a Redis past its maxmemory the record is refused (and counted as
-- lost), never written into memory the queue needs.
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
local keep = tonumber(ARGV[3])
local n = redis.call('ZCARD', KEYS[1])
if n > keep then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - keep - 1)
end
return 1
