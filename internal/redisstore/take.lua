-- The script that decides a RedisCounter's round trip: its calls, key by
-- key and, for each key, caller by caller in the order they came. A cost
-- is counted only when it fits under the limit, so a refused caller
-- spends nothing: the script adds the callers' costs with one INCRBY of
-- their sum and takes the refused ones back (DECRBY, or DEL of a key left
-- at 0) before it returns, which no other client can see between. The
-- usual round trip, where everything fits, so costs an existing fixed
-- window an INCRBY and a PTTL, as a plain counter does.
--
-- It runs on every round trip, so its common path is kept cheap for the
-- server, as measured in instructions per call (docs/benchmarks.md at
-- 719ca7e, "The script"):
-- functions that use many locals are made only in a call that needs
-- them, and a count of 1 goes to INCRBY as the string "1", since
-- redis.call formats a number argument with printf, which costs more than
-- the command.
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
local tonumber, call, pcall, type = tonumber, redis.call, redis.pcall, type
-- out starts with room for the usual reply (up to four fixed windows),
-- so that it does not grow slot by slot: each growth rehashes it. The
-- nils are not returned: a reply ends at its first nil.
local out, o, at, now, nowus = {nil, nil, nil, nil, nil, nil, nil, nil}, 0, 1, nil, nil
local function fatal(r)
  local find = string.find
  if find(r.err, 'WRONGTYPE', 1, true) or find(r.err, 'not an integer', 1, true) or find(r.err, 'overflow', 1, true) then
    return nil
  end
  return redis.error_reply((string.gsub(r.err, '^@user_script: %d+: %-?', '')))
end
-- The server's clock in ms, and in µs in nowus; a key that needs it
-- reads it with now = now or clock(), once per call.
local function clock()
  local t = redis.call('TIME')
  nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- The quota sets of the call (see quotaSet.scriptArgs): when ARGV starts
-- with Q, how many, and each set: the main limit's kind and name, how many
-- quotas, and each quota's kind, limit, window in ms and name. Each is
-- read once for all the keys of the call that use it.
local sets, limits
local cur, ga, gb, w, nw, ch, vals, hargs, badHash
if ARGV[1] == 'Q' then
  at = 3
  sets = {}
  for i = 1, tonumber(ARGV[2], 16) do
    local n = tonumber(ARGV[at+2], 16) + 1
    local set = {n = n, k = {ARGV[at]}, lim = {0}, ms = {0}, mul = {1}, fields = {}}
    local names = {ARGV[at+1]}
    at = at + 3
    for j = 2, n do
      set.k[j], set.lim[j], set.ms[j], names[j], set.mul[j] = ARGV[at], tonumber(ARGV[at+1], 16), tonumber(ARGV[at+2]), ARGV[at+3], 1
      at = at + 4
    end
    -- The fields HMGET reads: each limit's count and start, a sliding
    -- window's previous count, and e; fc, fs and fp are where in them.
    local f = {}
    set.fields, set.fc, set.fs, set.fp, set.cn, set.sn, set.pn = f, {}, {}, {}, names, {}, {}
    for j = 1, n do
      set.sn[j], set.pn[j] = names[j] .. ':s', names[j] .. ':p'
      f[#f+1], set.fc[j] = names[j], #f + 1
      f[#f+1], set.fs[j] = set.sn[j], #f + 1
      if set.k[j] == 's' then f[#f+1], set.fp[j] = set.pn[j], #f + 1 end
    end
    f[#f+1], set.fe = 'e', #f + 1
    sets[i] = set
  end
  cur, ga, gb, w, nw, ch, hargs = {}, {}, {}, {}, {}, {}, {}
  badHash = {err = 'WRONGTYPE the hash holds something other than counts'}
  -- period (calendarLua) and limits are made here, in a call with quotas
  -- only: making a function costs the server an object for each local it
  -- uses, on every call that makes it, which a call without quotas would
  -- pay for nothing.
  -- calendar.lua goes here
  -- A tenant with quotas keeps all its limits in one hash, "{<main key>}":
  -- for each limit, by its name, its count, its window's end (a fixed
  -- window), start (a sliding one, whose previous count is under :p) or
  -- period's start, and under e when the hash expires. limits reads a key's
  -- set and main limit from ARGV, and reads each limit's state from the
  -- hash, at now: into cur its count, into ga and gb what the script returns
  -- of it (see takeScript), into w a sliding window's weight and into nw a
  -- window that a count would start, or a sliding window's or a period's
  -- start, and into ch whether that is new. The key is the hash's, in
  -- braces. It returns the set, the hash, its expiry and, for a hash that
  -- cannot be read, the error.
  limits = function(key)
    local set = sets[tonumber(ARGV[at+1], 16)]
    local sk, sms = set.k, set.ms
    set.lim[1], sms[1] = tonumber(ARGV[at+2], 16), tonumber(ARGV[at+3])
    at = at + 4
    if sk[1] == 'b' then
      -- A bucket's cost counts in µs: it fits within the burst's time,
      -- the delay and the rounding's allowance (see kind b).
      local iv = sms[1]
      set.lim[1], set.mul[1] = set.lim[1] * iv + tonumber(ARGV[at]) + (iv * 0.0001 + 1), iv
      at = at + 1
    end
    now = now or clock()
    local t = now
    if not set.ps then
      -- The set's calendar periods (every kind but f and s), once per
      -- call.
      set.ps, set.pe = {}, {}
      for j = 2, set.n do
        if sk[j] ~= 'f' and sk[j] ~= 's' then set.ps[j], set.pe[j] = period(sk[j], t) end
      end
    end
    local ps, pe, fc, fs, fp = set.ps, set.pe, set.fc, set.fs, set.fp
    vals = pcall('HMGET', key, unpack(set.fields))
    if vals.err then return set, key, 0, vals end
    for j = 1, set.n do
      local k, ms = sk[j], sms[j]
      local c, s = tonumber(vals[fc[j]] or 0), tonumber(vals[fs[j]] or 0)
      if not c or not s then return set, key, 0, badHash end
      if k == 'b' then
        -- A bucket: c is its TAT; cur the µs until it is full again.
        cur[j], ga[j], gb[j], w[j], ch[j] = math.max(c - nowus, 0), 0, 0, 0, false
      elseif k == 'f' then
        if t < s then
          cur[j], ga[j], gb[j], w[j], ch[j] = c, s - t, 0, 0, false
        else
          cur[j], ga[j], gb[j], w[j], nw[j], ch[j] = 0, ms, 0, 0, t + ms, true
        end
      elseif k == 's' then
        local p = tonumber(vals[fp[j]] or 0)
        if not p then return set, key, 0, badHash end
        local ws = t - t % ms
        local new = s ~= ws
        if new then
          if s == ws - ms then p = c else p = 0 end
          c = 0
        end
        local a = t - ws
        cur[j], ga[j], gb[j], w[j], nw[j], ch[j] = c, a, p, p * (ms - a) / ms, ws, new
      else
        local p0 = ps[j]
        local new = s ~= p0
        if new then c = 0 end
        cur[j], ga[j], gb[j], w[j], nw[j], ch[j] = c, pe[j] - t, pe[j] - p0, 0, p0, new
      end
    end
    return set, key, tonumber(vals[set.fe] or 0), nil
  end
end
for ki = 1, #KEYS do
  local key = KEYS[ki]
  local kind, limit, msarg = ARGV[at], tonumber(ARGV[at+1], 16), ARGV[at+2]
  if kind == 'f' then
    at = at + 3
    local after = pcall('INCRBY', key, '1')
    if type(after) == 'table' then
      local e = fatal(after)
      if e then return e end
      out[o+1], out[o+2] = -3, 0
    else
      local res, a = after, 0
      if after > limit then
        res = -after
        if after == 1 then call('DEL', key) else call('DECRBY', key, 1) end
      end
      if after == 1 then
        if res > 0 then call('PEXPIRE', key, msarg) end
        a = tonumber(msarg)
      else
        a = call('PTTL', key)
        if a < 0 then
          if a == -1 then call('PEXPIRE', key, msarg) end
          a = tonumber(msarg)
        end
      end
      out[o+1], out[o+2] = a, res
    end
    o = o + 2
  elseif kind == 'b' or kind == 'B' then
    -- A token bucket, decided as GCRA (window/bucket.go is the same
    -- arithmetic in Go): ARGV holds the interval (the µs one unit takes to
    -- come back, Window/Limit, a decimal fraction), the most µs the bucket
    -- may be behind now after a caller (the burst's time, how long the
    -- callers may wait for their turn, and an allowance for rounding),
    -- the key's expiry in ms (an upper bound of that; 0: work it out) and,
    -- for B, the callers and their costs (see bucket.go). The key holds the tenant's theoretical arrival time
    -- (TAT): when, in µs on the server's clock, its bucket is full again;
    -- it expires then. A caller fits when the bucket, after its cost, is
    -- full again within the burst's time and the delay, and half an
    -- interval for rounding; a refused caller writes nothing. It returns
    -- a = 0 and, for each caller, the µs until the bucket is full after
    -- its decision, rounded up, or -that-1 for a refusal.
    local iv, most, px, n, costs = tonumber(ARGV[at+1]), tonumber(ARGV[at+2]), ARGV[at+3], 1, nil
    if kind == 'B' then
      n, costs = tonumber(ARGV[at+4], 16), at + 5
      at = costs + n
    else
      at = at + 4
    end
    now = now or clock()
    local v, tat = pcall('GET', key), nil
    if type(v) == 'table' then
      local e = fatal(v)
      if e then return e end
    else
      tat = tonumber(v or 0)
    end
    if tat == nil then
      out[o+1] = -3
      for j = 2, n + 1 do out[o+j] = 0 end
    else
      local left = math.max(tat - nowus, 0)
      local start = left
      for j = 1, n do
        local c = 1
        if costs then c = tonumber(ARGV[costs+j-1], 16) end
        if left + c * iv <= most then
          left = left + c * iv
          out[o+1+j] = math.ceil(left)
        else
          out[o+1+j] = -math.ceil(left) - 1
        end
      end
      if left > start then
        if px == '0' then px = math.ceil(left / 1000) + 1 end
        call('SET', key, nowus + left, 'PX', px)
      end
      out[o+1] = 0
    end
    o = o + 1 + n
  elseif kind == 'i' then
    -- A request in flight (Algorithm InFlight): ARGV holds the limit, the
    -- lease in ms, the request's token and its cost. The key is a sorted
    -- set of slots scored by the end of their lease; those that have
    -- ended are dropped first, and a is how many. The slots are taken
    -- when the cost fits, a member each (the token, then token.2 on), and
    -- the set lives a lease past its last lease.
    local tok, c = ARGV[at+3], tonumber(ARGV[at+4], 16)
    at = at + 5
    now = now or clock()
    local x = pcall('ZREMRANGEBYSCORE', key, '-inf', now)
    if type(x) == 'table' then
      local e = fatal(x)
      if e then return e end
      out[o+1], out[o+2] = -3, 0
    else
      local ms = tonumber(msarg)
      local used, ends = call('ZCARD', key), now + ms
      local res = -used - 1
      if used + c <= limit then
        if c == 1 then
          call('ZADD', key, ends, tok)
        else
          local m, args = tok, {}
          for i = 1, c do
            if i > 1 then m = tok .. '.' .. i end
            args[#args+1], args[#args+2] = ends, m
            if #args >= 1000 or i == c then
              call('ZADD', key, unpack(args))
              args = {}
            end
          end
        end
        -- The newest lease ends last: the set lives a lease past it.
        call('PEXPIRE', key, 2 * ms)
        res = used + c
      end
      out[o+1], out[o+2] = x, res
    end
    o = o + 2
  elseif kind == 'y' then
    -- The slots of a request in flight given back: ARGV holds its token
    -- and cost. It returns how many were still there.
    local tok, c = ARGV[at+1], tonumber(ARGV[at+2], 16)
    at = at + 3
    local gone, ms = 0, {tok}
    for i = 2, c + 1 do
      if #ms >= 1000 or i > c then
        local r = pcall('ZREM', key, unpack(ms))
        if type(r) == 'table' then
          local e = fatal(r)
          if e then return e end
          gone = -3
          break
        end
        gone, ms = gone + r, {}
      end
      if i <= c then ms[#ms+1] = tok .. '.' .. i end
    end
    out[o+1], o = gone, o + 1
  elseif kind == 'x' then
    -- A cost given back (Limiter.Release) or charged (Limiter.Settle) in
    -- a window without quotas, when it is still the window it was counted
    -- in: ARGV holds the window's kind (f or s), its length in ms, the
    -- cost (hexadecimal, a charge with a leading '-', which tonumber's
    -- strtoul would wrap), and its offset as the caller expects it now (a
    -- fixed window's ms left, a sliding window's ms run). A window whose
    -- offset is within half its length of that is the one. It returns what
    -- was given back or charged; a fixed window left at 0 is deleted, so
    -- that the next request starts one. A charge goes past the limit if
    -- need be, and never makes a key: a window that has gone (expired, or
    -- reset) is not charged.
    local k, ms, cs, want = ARGV[at+1], tonumber(ARGV[at+2]), ARGV[at+3], tonumber(ARGV[at+4])
    at = at + 5
    local c = nil
    if string.sub(cs, 1, 1) == '-' then c = -tonumber(string.sub(cs, 2), 16) else c = tonumber(cs, 16) end
    local curkey, off, given = key, nil, 0
    if k == 'b' then
      -- A token bucket (ms is its interval): it is full again no sooner
      -- than now.
      now = now or clock()
      local v = pcall('GET', key)
      local tat = type(v) ~= 'table' and tonumber(v or 0)
      if not tat then
        given = -3
      else
        local after = math.max(math.max(tat - nowus, 0) - c * ms, 0)
        if after > 0 then call('SET', key, nowus + after, 'PX', math.ceil(after / 1000) + 1) else call('DEL', key) end
        given = c
      end
      off = -1
    elseif k == 's' then
      now = now or clock()
      local index = math.floor(now / ms)
      off = now - index * ms
      curkey = key .. ':' .. ARGV[at-3] .. ':' .. string.format('%d', index)
    else
      off = call('PTTL', key)
    end
    if off >= 0 and 2 * math.abs(off - want) < ms then
      local v = pcall('GET', curkey)
      if type(v) == 'table' then
        local e = fatal(v)
        if e then return e end
        given = -3
      elseif c < 0 then
        if v then
          if not tonumber(v) then
            given = -3
          else
            call('INCRBY', curkey, string.format('%d', -c))
            given = -c
          end
        end
      else
        v = tonumber(v or 0)
        if not v then
          given = -3
        elseif v > 0 then
          given = math.min(v, c)
          if given == v and k == 'f' then call('DEL', curkey) else call('DECRBY', curkey, given) end
        end
      end
    end
    out[o+1], o = given, o + 1
  elseif kind == 'u' or kind == 'r' then
    -- Usage (u) and Reset (r) of a tenant without quotas: ARGV holds its
    -- kind (f or s) and its window in ms. Usage returns a (a fixed
    -- window's PTTL, how far a sliding one has run), prev and the count.
    local k, ms = ARGV[at+1], tonumber(ARGV[at+2])
    at = at + 3
    local curkey, prevkey, a = key, nil, 0
    if k == 'b' then
      -- A token bucket: its µs until full, rounded up, as the count.
      now = now or clock()
      if kind == 'u' then
        local tat = tonumber(call('GET', key) or 0)
        if not tat then return redis.error_reply('WRONGTYPE the key holds something other than a token bucket') end
        out[o+1], out[o+2], out[o+3] = 0, 0, math.ceil(math.max(tat - nowus, 0))
        o = o + 3
      else
        call('DEL', key)
      end
    elseif k == 'i' then
      -- Requests in flight: the slots whose lease runs on.
      now = now or clock()
      if kind == 'u' then
        local n = pcall('ZCOUNT', key, '(' .. now, '+inf')
        if type(n) == 'table' then return redis.error_reply('WRONGTYPE the key holds something other than slots in flight') end
        out[o+1], out[o+2], out[o+3] = 0, 0, n
        o = o + 3
      else
        call('DEL', key)
      end
    elseif k == 's' then
      now = now or clock()
      local index = math.floor(now / ms)
      a = now - index * ms
      curkey = key .. ':' .. ARGV[at-1] .. ':' .. string.format('%d', index)
      prevkey = key .. ':' .. ARGV[at-1] .. ':' .. string.format('%d', index - 1)
    end
    if k == 'i' or k == 'b' then
    elseif kind == 'r' then
      call('DEL', curkey)
      if prevkey then call('DEL', prevkey) end
    else
      local count, prev = tonumber(call('GET', curkey) or 0), 0
      if prevkey then prev = tonumber(call('GET', prevkey) or 0) else a = call('PTTL', curkey) end
      if not count or not prev then return redis.error_reply('WRONGTYPE the key holds something other than a count') end
      out[o+1], out[o+2], out[o+3] = a, prev, count
      o = o + 3
    end
  elseif kind == 'g' or kind == 'G' or kind == 'U' or kind == 'R' or kind == 'X' then
    local set, hkey, e, err = limits(key)
    local nl, n, costs = set.n, 1, nil
    if kind == 'G' then
      n, costs = tonumber(ARGV[at], 16), at + 1
      at = costs + n
    end
    if kind == 'X' then
      -- A cost given back (Limiter.Release) or charged (Limiter.Settle,
      -- a cost with a leading '-', as kind x has it) in a tenant's limits:
      -- ARGV holds the cost and, for each limit, its offset as the caller
      -- expects it now (a fixed window's or a period's ms left, a sliding
      -- window's ms run). A limit whose window is the one (not new, and
      -- within half its length, or its period's, of that offset) gets the
      -- cost back, or is charged it, past its limit if need be. A window
      -- that is new is never charged, nor is a hash that has gone: its
      -- windows all read as new. It returns what the main limit got back
      -- or was charged.
      local cs, given, m, grown = ARGV[at], 0, 0, false
      local c = nil
      if string.sub(cs, 1, 1) == '-' then c = -tonumber(string.sub(cs, 2), 16) else c = tonumber(cs, 16) end
      local offs = at
      at = at + 1 + nl
      if err then
        local f = fatal(err)
        if f then return f end
        given = -3
      else
        for j = 1, nl do
          local span = set.ms[j]
          if set.k[j] ~= 'f' and set.k[j] ~= 's' then span = gb[j] end
          if set.k[j] == 'b' then
            -- A bucket has no windows: it is full again no sooner than now.
            -- Its offset is 1 for a mark that names no window, which
            -- leaves it alone.
            if tonumber(ARGV[offs+j]) == 0 then
              local left = math.max(cur[j] - c * set.mul[j], 0)
              if j == 1 then given = c end
              hargs[m+1], hargs[m+2], m = set.cn[j], nowus + left, m + 2
              -- A charge may put the bucket's full time past the hash's.
              local kp = now + math.ceil(left / 1000) + 1
              if kp > e then hargs[m+1], hargs[m+2], m, e, grown = 'e', kp, m + 2, kp, true end
            end
          elseif not ch[j] and (cur[j] > 0 or c < 0) and 2 * math.abs(ga[j] - tonumber(ARGV[offs+j])) < span then
            local back = math.min(cur[j], c)
            if j == 1 then given = math.abs(back) end
            hargs[m+1], hargs[m+2], m = set.cn[j], cur[j] - back, m + 2
          end
        end
        if m > 0 then call('HSET', hkey, unpack(hargs, 1, m)) end
        if grown then call('PEXPIRE', hkey, e - now) end
      end
      out[o+1], o = given, o + 1
    elseif kind == 'R' then
      call('DEL', hkey)
    elseif err then
      local f = fatal(err)
      if f then return f end
      if kind == 'U' then return redis.error_reply('WRONGTYPE ' .. hkey .. ' holds something other than a tenant\'s limits') end
      out[o+1] = -3
      for j = o + 2, o + 2 * nl + n * nl do out[j] = 0 end
      o = o + 2 * nl + n * nl
    elseif kind == 'U' then
      for j = 1, nl do
        local a = ga[j]
        if ch[j] and set.k[j] == 'f' then a = -2 end
        out[o+1], out[o+2], out[o+3] = a, gb[j], math.ceil(cur[j])
        o = o + 3
      end
    else
      local slim, smul, head, added = set.lim, set.mul, o, 0
      o = o + 2 * nl
      for i = 1, n do
        local c, fits = 1, true
        if costs then c = tonumber(ARGV[costs+i-1], 16) end
        for j = 1, nl do
          if w[j] + cur[j] + c * smul[j] > slim[j] then
            fits = false
            break
          end
        end
        -- A bucket's µs are rounded up to whole ones in the reply.
        if fits then
          for j = 1, nl do
            local v = cur[j] + c * smul[j]
            cur[j], out[o+j] = v, math.ceil(v)
          end
          added = added + c
        else
          for j = 1, nl do
            local v = cur[j]
            if w[j] + v + c * smul[j] > slim[j] then out[o+j] = -math.ceil(v) - 1 else out[o+j] = math.ceil(v) end
          end
        end
        o = o + nl
      end
      for j = 1, nl do
        out[head+2*j-1], out[head+2*j] = ga[j], gb[j]
      end
      if added > 0 then
        -- Each count; a window's or period's start (and a sliding
        -- window's previous count) when it is new; the expiry when it
        -- grows.
        -- The hash lives until its last window ends: a fixed window's end,
        -- a sliding one's a window later, a period's end.
        local cn, sn, pn, fp, sk, sms = set.cn, set.sn, set.pn, set.fp, set.k, set.ms
        local m, last = 0, e
        for j = 1, nl do
          hargs[m+1], hargs[m+2], m = cn[j], cur[j], m + 2
          if ch[j] then
            hargs[m+1], hargs[m+2], m = sn[j], nw[j], m + 2
            if fp[j] then hargs[m+1], hargs[m+2], m = pn[j], gb[j], m + 2 end
          end
          local kp = now + ga[j]
          if sk[j] == 's' then kp = nw[j] + 2 * sms[j] end
          if sk[j] == 'b' then
            -- A bucket keeps its TAT, and lives until it is full again.
            hargs[m], kp = nowus + cur[j], now + math.ceil(cur[j] / 1000) + 1
          end
          if kp > last then last = kp end
        end
        if last > e then
          hargs[m+1], hargs[m+2], m = 'e', last, m + 2
          call('HSET', hkey, unpack(hargs, 1, m))
          call('PEXPIRE', hkey, last - now)
        else
          call('HSET', hkey, unpack(hargs, 1, m))
        end
      end
    end
  else
    -- costs holds the callers' costs, unless there is one caller of
    -- cost 1 (kinds f and s).
    local sliding, n, total, costs = kind == 's' or kind == 'S', 1, 1, nil
    if kind == 's' then
      at = at + 3
    else
      n, costs, total = tonumber(ARGV[at+3], 16), {}, 0
      for j = 1, n do
        costs[j] = tonumber(ARGV[at+3+j], 16)
        total = total + costs[j]
      end
      at = at + 4 + n
    end
    local ms, a, prev, curkey = tonumber(msarg), 0, 0, key
    if sliding then
      now = now or clock()
      local index = math.floor(now / ms)
      a = now - index * ms
      local tag = key .. ':' .. msarg .. ':'
      curkey = tag .. string.format('%d', index)
      prev = pcall('GET', tag .. string.format('%d', index - 1))
      if type(prev) == 'table' then
        local e = fatal(prev)
        if e then return e end
        prev = nil
      elseif prev then prev = tonumber(prev) else prev = 0 end
    end
    local after = nil
    if prev ~= nil then
      local by = total
      if by == 1 then by = '1' end
      after = pcall('INCRBY', curkey, by)
      if type(after) == 'table' then
        local e = fatal(after)
        if e then return e end
        after = nil
      end
    end
    local head = 1
    if sliding then head = 2 end
    if after == nil then
      out[o+1] = -3
      for j = 2, head + n do out[o+j] = 0 end
    else
      local cur, weight = after - total, 0
      local start = cur
      if sliding then weight = prev * (ms - a) / ms end
      for j = 1, n do
        local c = 1
        if costs then c = costs[j] end
        if weight + cur + c <= limit then
          cur = cur + c
          out[o+head+j] = cur
        else
          out[o+head+j] = -cur - 1
        end
      end
      if cur == 0 then
        call('DEL', curkey)
      elseif cur < after then
        call('DECRBY', curkey, after - cur)
      end
      if sliding then
        if start == 0 and cur > 0 then call('PEXPIRE', curkey, 2 * ms - a) end
        out[o+2] = prev
      elseif start == 0 then
        if cur > 0 then call('PEXPIRE', curkey, msarg) end
        a = ms
      else
        a = call('PTTL', curkey)
        if a < 0 then
          if a == -1 then call('PEXPIRE', curkey, msarg) end
          a = ms
        end
      end
      out[o+1] = a
    end
    o = o + head + n
  end
end
return out
