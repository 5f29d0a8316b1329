-- The call's arguments and state, and the helpers that every kind of key
-- uses.

-- A FUNCTION library's body runs at FUNCTION LOAD with none of Lua's own
-- globals (tonumber, math, string) and only part of the redis API, so the
-- builtins the functions use, redis.call and redis.pcall among them, are
-- bound to these locals by take's first call; builtins, made before the
-- locals, still names the globals.
local function builtins()
  return tonumber, type, unpack, math.floor, math.ceil, math.max, math.min, math.abs,
    string.find, string.gsub, string.sub, string.format, redis.call, redis.pcall
end
local tonumber, type, unpack, floor, ceil, max, min, abs, find, gsub, sub, format, call, pcall
local bound = false

-- The state of one call, set by take before its first key.
local argv, at   -- the call's ARGV, and the index of its next unread argument
local out, o     -- the reply, and how many values it holds
local now, nowus -- the server's clock in ms and µs, read once per call, by a key that needs it
local sets       -- the call's quota sets (readSets)
local cur, ga, gb, w, nw, ch, hargs -- each limit's state, for the quota key being decided (readLimits)

---------------------------------------------------------------- arguments

-- The cursor moves in two places only: take moves it past each key's
-- kind and fixed arguments (as many as arity says), and hands the kind's
-- function i, the kind's index, from which the function names its
-- arguments (argv[i+1] on) on its first line; read and readCosts read what
-- follows them, lists whose length an argument gave.

-- read returns the next n arguments, as the strings they are, and moves
-- the cursor past them.
local function read(n)
  local i = at
  at = i + n
  if n == 1 then return argv[i] end
  return unpack(argv, i, i + n - 1)
end

-- readCosts reads the callers' costs: how many (n) and each, all hexadecimal.
-- It returns the list and n.
local function readCosts()
  local i = at
  local n = tonumber(argv[i], 16)
  local list = {}
  for j = 1, n do list[j] = tonumber(argv[i + j], 16) end
  at = i + 1 + n
  return list, n
end

-- signed reads a cost that may be a charge: hexadecimal, with a leading
-- '-' for a charge (tonumber's strtoul would wrap a negative one).
local function signed(cs)
  if sub(cs, 1, 1) == '-' then return -tonumber(sub(cs, 2), 16) end
  return tonumber(cs, 16)
end

------------------------------------------------------------------ helpers

-- The limit of the last window read, as sent and as a number: the keys of
-- a batch mostly share their limiter's limit, and comparing two Lua
-- strings costs less than tonumber's strtoul.
local limitArg, limitNum

-- failed tells what an error of redis.pcall, r (a table), means for its
-- key: nil when the key holds something other than a count (WRONGTYPE, a
-- string that is no integer, an overflow), which fails that key alone
-- (a = -3); else the error reply that ends the call with the server's
-- own words, stripped of the "@user_script: <line>:" that Redis 6 puts
-- before them. A reply is an error when type(r) == 'table' (HMGET's, when
-- r.err): the callers test that first, the usual case, without a call.
local function failed(r)
  local e = r.err
  if find(e, 'WRONGTYPE', 1, true) or find(e, 'not an integer', 1, true) or find(e, 'overflow', 1, true) then
    return nil
  end
  return redis.error_reply((gsub(e, '^@user_script: %d+: %-?', '')))
end

-- clock reads the server's clock: it returns ms and sets nowus. A key
-- that needs the time takes now = now or clock(), once per call.
local function clock()
  local t = redis.call('TIME')
  nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- slidingKey is the key of a sliding window: "<tag>:<window ms>:<number>".
local function slidingKey(tag, msarg, index)
  return tag .. ':' .. msarg .. ':' .. format('%d', index)
end

-- slidingNow returns the sliding window of ms (msarg as sent) that holds
-- now: its key, how far it has run, and its number.
local function slidingNow(tag, msarg, ms)
  now = now or clock()
  local index = floor(now / ms)
  return slidingKey(tag, msarg, index), now - index * ms, index
end

-- expiresIn returns what a fixed window's key has left in ms, giving one
-- that has none (-1) its window; a key that has gone (-2) reads as whole.
local function expiresIn(key, msarg)
  local a = call('PTTL', key)
  if a < 0 then
    if a == -1 then call('PEXPIRE', key, msarg) end
    a = tonumber(msarg)
  end
  return a
end
