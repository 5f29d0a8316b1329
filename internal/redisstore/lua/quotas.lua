------------------------------------------------------------------ quotas

local badHash = {err = 'WRONGTYPE the hash holds something other than counts'}

-- readSets reads the call's quota sets, when ARGV starts with Q: how
-- many, and each set: the main limit's kind and name, how many quotas,
-- and each quota's kind, limit (hex), window ms and name. It works out
-- the hash fields each set reads: each limit's count and start, a sliding
-- window's previous count, and e (the hash's expiry); fc, fs, fp and fe
-- are where in them.
local function readSets()
  sets = {}
  for i = 1, tonumber(read(1), 16) do
    local mainKind, mainName, quotas = read(3)
    local n = tonumber(quotas, 16) + 1
    local set = {n = n, k = {mainKind}, lim = {0}, ms = {0}, mul = {1}, fields = {}}
    local names = {mainName}
    for j = 2, n do
      local k, lim, ms, name = read(4)
      set.k[j], set.lim[j], set.ms[j], names[j], set.mul[j] = k, tonumber(lim, 16), tonumber(ms), name, 1
    end
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
end

-- readLimits reads a quota key's set and main limit (ARGV: set number,
-- limit or burst, window ms or interval, and for a bucket its delay), and
-- each limit's state from the hash "{<main key>}", at now: into cur its
-- count (a bucket's µs until full), into ga and gb its a and prev, into
-- w a sliding window's weight, into nw the start a count would write,
-- and into ch whether that is new. It returns the set, the hash, its
-- expiry and, for a hash that cannot be read, the error.
local function readLimits(key, setno, lim, ms)
  local set = sets[tonumber(setno, 16)]
  local sk, sms = set.k, set.ms
  set.lim[1], sms[1] = tonumber(lim, 16), tonumber(ms)
  if sk[1] == 'b' then
    -- A bucket's cost counts in µs: it fits within the burst's time,
    -- the delay and the rounding's allowance.
    local iv = sms[1]
    set.lim[1], set.mul[1] = set.lim[1] * iv + tonumber(read(1)) + (iv * 0.0001 + 1), iv
  end
  now = now or clock()
  local t = now
  if not set.ps then
    -- The set's calendar periods (every kind but f and s), once per call.
    set.ps, set.pe = {}, {}
    for j = 2, set.n do
      if sk[j] ~= 'f' and sk[j] ~= 's' then set.ps[j], set.pe[j] = period(sk[j], t) end
    end
  end
  local ps, pe, fc, fs, fp = set.ps, set.pe, set.fc, set.fs, set.fp
  local vals = pcall('HMGET', key, unpack(set.fields))
  if vals.err then return set, key, 0, vals end
  for j = 1, set.n do
    local k, ms = sk[j], sms[j]
    local c, s = tonumber(vals[fc[j]] or 0), tonumber(vals[fs[j]] or 0)
    if not c or not s then return set, key, 0, badHash end
    if k == 'b' then
      -- A bucket: c is its TAT; cur the µs until it is full again.
      cur[j], ga[j], gb[j], w[j], ch[j] = max(c - nowus, 0), 0, 0, 0, false
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

-- quotaTake (g, G) decides each caller against every limit of the set,
-- and writes the counts, and what else changed, with one HSET.
local function quotaTake(set, hkey, e, n, costs)
  local nl, slim, smul, head, added = set.n, set.lim, set.mul, o, 0
  o = o + 2 * nl
  for i = 1, n do
    local c, fits = 1, true
    if costs then c = costs[i] end
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
        cur[j], out[o+j] = v, ceil(v)
      end
      added = added + c
    else
      for j = 1, nl do
        local v = cur[j]
        if w[j] + v + c * smul[j] > slim[j] then out[o+j] = -ceil(v) - 1 else out[o+j] = ceil(v) end
      end
    end
    o = o + nl
  end
  for j = 1, nl do
    out[head+2*j-1], out[head+2*j] = ga[j], gb[j]
  end
  if added == 0 then return end
  -- Each count; a window's or period's start (and a sliding window's
  -- previous count) when it is new; the expiry when it grows. The hash
  -- lives until its last window ends.
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
      hargs[m], kp = nowus + cur[j], now + ceil(cur[j] / 1000) + 1
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

-- quotaUsage (U) returns, for each limit, a, prev and the count.
local function quotaUsage(set)
  for j = 1, set.n do
    local a = ga[j]
    if ch[j] and set.k[j] == 'f' then a = -2 end
    out[o+1], out[o+2], out[o+3] = a, gb[j], ceil(cur[j])
    o = o + 3
  end
end

-- quotaSettle (X) gives a cost back, or charges one, in each limit whose
-- window is the one the caller counted in. ARGV: the cost (as kind x) and
-- each limit's offset. Returns what the main limit got back or was
-- charged.
local function quotaSettle(set, hkey, e, err)
  local nl = set.n
  local c = signed(read(1))
  local offs = {read(nl)}
  local given, m, grown = 0, 0, false
  if err then
    local e = failed(err)
    if e then return e end
    given = -3
  else
    for j = 1, nl do
      local span = set.ms[j]
      if set.k[j] ~= 'f' and set.k[j] ~= 's' then span = gb[j] end
      if set.k[j] == 'b' then
        -- A bucket has no windows: it is full again no sooner than now.
        -- Its offset is 1 for a mark that names no window.
        if tonumber(offs[j]) == 0 then
          local left = max(cur[j] - c * set.mul[j], 0)
          if j == 1 then given = c end
          hargs[m+1], hargs[m+2], m = set.cn[j], nowus + left, m + 2
          -- A charge may put the bucket's full time past the hash's.
          local kp = now + ceil(left / 1000) + 1
          if kp > e then hargs[m+1], hargs[m+2], m, e, grown = 'e', kp, m + 2, kp, true end
        end
      elseif not ch[j] and (cur[j] > 0 or c < 0) and 2 * abs(ga[j] - tonumber(offs[j])) < span then
        local back = min(cur[j], c)
        if j == 1 then given = abs(back) end
        hargs[m+1], hargs[m+2], m = set.cn[j], cur[j] - back, m + 2
      end
    end
    if m > 0 then call('HSET', hkey, unpack(hargs, 1, m)) end
    if grown then call('PEXPIRE', hkey, e - now) end
  end
  out[o+1], o = given, o + 1
end

-- g, G, U, R, X: a tenant with quotas, its hash "{<main key>}" (the key
-- as sent). g is one caller of cost 1, G n callers and their costs, U a
-- usage, R a reset, X a give-back or charge.
local function quota(key, kind, i)
  local set, hkey, e, err = readLimits(key, argv[i+1], argv[i+2], argv[i+3])
  local nl, n, costs = set.n, 1, nil
  if kind == 'G' then
    costs, n = readCosts()
  end
  if kind == 'X' then return quotaSettle(set, hkey, e, err) end
  if kind == 'R' then
    call('DEL', hkey)
    return
  end
  if err then
    local e = failed(err)
    if e then return e end
    if kind == 'U' then return redis.error_reply('WRONGTYPE ' .. hkey .. ' holds something other than a tenant\'s limits') end
    out[o+1] = -3
    for j = o + 2, o + 2 * nl + n * nl do out[j] = 0 end
    o = o + 2 * nl + n * nl
    return
  end
  if kind == 'U' then return quotaUsage(set) end
  return quotaTake(set, hkey, e, n, costs)
end
