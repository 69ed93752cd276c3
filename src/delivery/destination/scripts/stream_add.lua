-- Adds an event to a Redis stream once: the marker key, kept for the dedup window,
-- holds the entry ID an earlier attempt added, and a repeat adds nothing.
-- KEYS[1] the stream, KEYS[2] the event's marker
-- ARGV[1] the marker's lifetime in seconds, ARGV[2] MAXLEN (0: none),
-- ARGV[3..] the entry's field/value pairs
-- Returns {1, id} when added, {0, id} when the marker holds one.
local seen = redis.call('GET', KEYS[2])
if seen then
  return {0, seen}
end
local id
if ARGV[2] ~= '0' then
  id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, 3))
else
  id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 3))
end
redis.call('SET', KEYS[2], id, 'EX', ARGV[1])
return {1, id}
