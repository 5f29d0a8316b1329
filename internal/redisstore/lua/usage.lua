------------------------------------------------------------ usage, reset

-- u and r: the usage (a, prev, count) or reset of a key without quotas.
-- ARGV: its kind (f, s, b or i) and window ms.
local function usage(key, kind, i)
  local k, msarg = argv[i+1], argv[i+2]
  local ms = tonumber(msarg)
  if k == 'b' then
    -- A token bucket: its µs until full, rounded up, as the count.
    now = now or clock()
    if kind == 'r' then
      call('DEL', key)
      return
    end
    local tat = tonumber(call('GET', key) or 0)
    if not tat then return redis.error_reply('WRONGTYPE the key holds something other than a token bucket') end
    out[o+1], out[o+2], out[o+3] = 0, 0, ceil(max(tat - nowus, 0))
    o = o + 3
    return
  end
  if k == 'i' then
    -- Requests in flight: the slots whose lease runs on.
    now = now or clock()
    if kind == 'r' then
      call('DEL', key)
      return
    end
    local n = pcall('ZCOUNT', key, '(' .. now, '+inf')
    if type(n) == 'table' then return redis.error_reply('WRONGTYPE the key holds something other than slots in flight') end
    out[o+1], out[o+2], out[o+3] = 0, 0, n
    o = o + 3
    return
  end
  local curkey, prevkey, a = key, nil, 0
  if k == 's' then
    local index
    curkey, a, index = slidingNow(key, msarg, ms)
    prevkey = slidingKey(key, msarg, index - 1)
  end
  if kind == 'r' then
    call('DEL', curkey)
    if prevkey then call('DEL', prevkey) end
    return
  end
  local count, prev = tonumber(call('GET', curkey) or 0), 0
  if prevkey then prev = tonumber(call('GET', prevkey) or 0) else a = call('PTTL', curkey) end
  if not count or not prev then return redis.error_reply('WRONGTYPE the key holds something other than a count') end
  out[o+1], out[o+2], out[o+3] = a, prev, count
  o = o + 3
end
