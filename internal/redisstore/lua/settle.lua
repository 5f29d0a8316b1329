----------------------------------------------------------- give back, charge

-- x: a cost given back (Release) or charged (Settle, a leading '-') in a
-- window without quotas, when it is still the window it was counted in.
-- ARGV: the window's kind (f, s or b), its ms (a bucket's interval), the
-- cost and the offset the caller expects. Returns what was given back or
-- charged, or -3.
local function settle(key, kind, i)
  local k, msarg, cs, want = argv[i+1], argv[i+2], argv[i+3], argv[i+4]
  local ms, c = tonumber(msarg), signed(cs)
  want = tonumber(want)
  local curkey, off, given = key, nil, 0
  if k == 'b' then
    -- A token bucket (ms is its interval): full again no sooner than now.
    now = now or clock()
    local v = pcall('GET', key)
    local tat = type(v) ~= 'table' and tonumber(v or 0)
    if not tat then
      given = -3
    else
      local after = max(max(tat - nowus, 0) - c * ms, 0)
      if after > 0 then call('SET', key, nowus + after, 'PX', ceil(after / 1000) + 1) else call('DEL', key) end
      given = c
    end
    off = -1
  elseif k == 's' then
    curkey, off = slidingNow(key, msarg, ms)
  else
    off = call('PTTL', key)
  end
  if off >= 0 and 2 * abs(off - want) < ms then
    local v = pcall('GET', curkey)
    if type(v) == 'table' then
      local e = failed(v)
      if e then return e end
      given = -3
    elseif c < 0 then
      if v then
        if not tonumber(v) then
          given = -3
        else
          call('INCRBY', curkey, format('%d', -c))
          given = -c
        end
      end
    else
      v = tonumber(v or 0)
      if not v then
        given = -3
      elseif v > 0 then
        given = min(v, c)
        if given == v and k == 'f' then call('DEL', curkey) else call('DECRBY', curkey, given) end
      end
    end
  end
  out[o+1], o = given, o + 1
end
