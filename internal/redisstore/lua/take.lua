-- The library that decides a RedisCounter's round trip: its calls, key by
-- key and, for each key, caller by caller in the order they came. A cost
-- is counted only when it fits under the limit, so a refused caller
-- spends nothing: the script adds the callers' costs with one INCRBY of
-- their sum and takes the refused ones back (DECRBY, or DEL of a key left
-- at 0) before it returns, which no other client can see between. The
-- usual round trip, where everything fits, so costs an existing fixed
-- window an INCRBY and a PTTL, as a plain counter does.
--
-- The files of this folder are one Lua text, in the order script.go
-- gives: args.lua (the call's arguments and the helpers every kind
-- uses), calendar.lua, one file per kind of key, and this file, which
-- dispatches them. On Redis 7 and later, and Valkey, the text is a
-- FUNCTION library, loaded once per server: its functions are made at
-- FUNCTION LOAD, and each FCALL ratelimit_take (or ratelimit_read, for a
-- usage, which writes nothing) runs take alone. Redis 6.0, which has no
-- FUNCTION, runs the same text as an EVAL script that ends by calling
-- take.
--
-- KEYS are the keys (for a sliding window, the tag of a tenant's keys).
-- ARGV holds, for each key, its kind, its limit, its window in
-- milliseconds and, for kinds F and S, the number of callers n and their
-- n costs. Kind f is a fixed window and s a sliding one, each with one
-- caller of cost 1, the usual case, which carries no costs; F and S are
-- the same windows with any callers and costs. The limit, n and the costs
-- are hexadecimal: tonumber reads a base-16 string with strtoul, once,
-- where a decimal one costs two strtod calls, the script's largest cost
-- after the commands themselves. The window is decimal, as the commands
-- that take it want it.
--
-- For each key it returns a; for a sliding window, prev; and one value
-- per caller: the key's count after the caller's decision, or -count-1
-- for a refusal. For a fixed window, a is the milliseconds it has left; a
-- new window gets its expiry in the same script, so the first request of
-- a window starts its clock and no key is ever left without an expiry.
-- For a sliding window, a is how far the current window has run on the
-- server's clock (TIME) and prev the count of the window before; the
-- window's key is "<tag>:<window ms>:<window number>", and expires at the
-- end of the window after it. A key that holds something other than a
-- count (WRONGTYPE, or a string that is not an integer) answers a = -3
-- and fails alone. Any other error of a command (NOPERM, OOM, READONLY:
-- the server's setup, which every key meets alike) ends the script with
-- the server's own words, stripped of the "@user_script: <line>:" that
-- Redis 6 puts before them; the keys decided before it in the same call
-- keep their counts.
--
-- A tenant with quotas is one key, its hash "{<main key>}" (see limits
-- below for its fields), of kind g (one caller of cost 1) or G (n callers
-- and their costs). ARGV then starts with Q, how many quota sets the call
-- has, and each set (see quotas.go); such a key's own arguments are its
-- kind, its set's number, its main limit and its main window in ms. The
-- script reads the hash with one HMGET, decides each caller against every
-- limit, and writes the counts, and what else changed, with one HSET. It
-- returns, for each limit, a and prev as above (for a calendar period, a
-- is the milliseconds to its end and prev its length); then, for each
-- caller, one value per limit: the limit's count after the caller's
-- decision, or -count-1 where the cost does not fit, and a caller is
-- allowed only when none is negative. Kinds U and R read (a, prev and the
-- count of each limit) and delete such a hash, for a usage and a reset;
-- kinds u and r do the same for a tenant without quotas, given its
-- window's kind and length. Kinds i and y take and give back slots in
-- flight, x and X give back a cost or charge one, and b and
-- B decide a token bucket (see below; a tenant with quotas whose main
-- limit is a bucket has main kind b in its set, and its key's arguments
-- carry the bucket's burst, interval and delay where a window's carry its
-- limit and window).

----------------------------------------------------------------- dispatch

-- The function that decides each kind of key, and how many fixed
-- arguments follow the kind. Any other letter is read as F.
local kinds = {
  f = fixedOne, F = window, s = window, S = window,
  b = bucket, B = bucket,
  i = inflight, y = inflightBack, x = settle,
  u = usage, r = usage,
  g = quota, G = quota, U = quota, R = quota, X = quota,
}
local arity = {
  f = 2, F = 2, s = 2, S = 2,
  b = 3, B = 3,
  i = 4, y = 2, x = 4,
  u = 2, r = 2,
  g = 3, G = 3, U = 3, R = 3, X = 3,
}

-- take decides a round trip's keys, in order, and returns their values.
local function take(keys, args)
  if not bound then
    tonumber, type, unpack, floor, ceil, max, min, abs, find, gsub, sub, format, call, pcall = builtins()
    bound = true
  end
  -- out starts with room for the usual reply (up to four fixed windows),
  -- so that it does not grow slot by slot; the nils are not returned.
  argv, at, out, o, now, nowus, sets = args, 1, {nil, nil, nil, nil, nil, nil, nil, nil}, 0, nil, nil, nil
  if args[1] == 'Q' then
    at = 2
    readSets()
  end
  local kinds, arity = kinds, arity -- in registers: read once per key
  for ki = 1, #keys do
    local i, kind = at, args[at]
    at = i + 1 + (arity[kind] or 2)
    local e = (kinds[kind] or window)(keys[ki], kind, i)
    if e then return e end
  end
  return out
end
