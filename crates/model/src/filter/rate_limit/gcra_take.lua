-- GCRA "take up to n tokens" for Rampart's GLOBAL rate limiting (one bucket, one atomic call).
--
-- KEYS[1]  the bucket key. Its value is the bucket's theoretical arrival time (TAT), a decimal
--          integer in microseconds of Redis's own clock; an absent key is a full bucket.
-- ARGV[1]  emission interval in microseconds, an integer >= 1 (the time one token stands for).
-- ARGV[2]  tolerance in microseconds, an integer >= ARGV[1] and <= 2^52: burst * interval, how
--          far the TAT may run ahead of now.
-- ARGV[3]  tokens wanted, an integer >= 0.
--
-- Grants g = min(wanted, tokens in the bucket) and moves the TAT on by g * interval; then sets
-- the key to expire when the bucket is full again (1 ms later), so idle keys disappear. Returns
--   {granted, retry_after_us, reset_after_us, remaining}
-- granted: g; retry_after_us: 0 when a whole token is left, else the time until the next one;
-- reset_after_us: the time until the bucket is full again; remaining: whole tokens left.
-- Anything else in ARGV answers an error reply ("ERR rampart gcra: ...").
--
-- The clock is Redis's (TIME), so every Rampart host sharing this Redis shares one time source.
-- Needs Redis >= 5, where scripts replicate their effects (here: one SET with PX), so calling
-- TIME before a write is allowed. Every number stays below 2^53, exact in Lua's doubles.
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local wanted = tonumber(ARGV[3])
if not interval or not tolerance or not wanted
    or interval % 1 ~= 0 or tolerance % 1 ~= 0 or wanted % 1 ~= 0
    or interval < 1 or tolerance < interval or tolerance > 2^52 or wanted < 0 then
  return redis.error_reply('ERR rampart gcra: want interval_us >= 1, interval_us <= tolerance_us <= 2^52, wanted >= 0 (integers)')
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
-- An absent key (false) or an unreadable value is a full bucket.
local tat = tonumber(redis.call('GET', KEYS[1])) or now
local ahead = math.max(tat - now, 0)
local available = 0
if ahead < tolerance then
  available = math.floor((tolerance - ahead) / interval)
end
local granted = math.min(wanted, available)
local new_ahead = ahead + granted * interval
if granted > 0 then
  -- One millisecond more than the reset: expiry runs on Redis's millisecond clock, which may
  -- stand up to a millisecond apart from TIME; the key must not vanish before the bucket is full.
  redis.call('SET', KEYS[1], string.format('%.0f', now + new_ahead), 'PX', math.ceil(new_ahead / 1000) + 1)
end
local remaining = math.max(math.floor((tolerance - new_ahead) / interval), 0)
local retry_after = 0
if remaining < 1 then
  retry_after = interval + new_ahead - tolerance
end
return {granted, retry_after, new_ahead, remaining}
