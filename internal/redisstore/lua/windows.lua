------------------------------------------------------------- fixed window

-- f: a fixed window, one caller of cost 1 (the usual case). ARGV: limit
-- (hex), window ms. Returns a (ms left) and the count, or -count-1.
local function fixedOne(key, kind, i)
  local limit, msarg = argv[i+1], argv[i+2]
  if limit ~= limitArg then limitArg, limitNum = limit, tonumber(limit, 16) end
  limit = limitNum
  local after = pcall('INCRBY', key, '1')
  if type(after) == 'table' then
    local e = failed(after)
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
      -- expiresIn, written out: this is every round trip's usual path.
      a = call('PTTL', key)
      if a < 0 then
        if a == -1 then call('PEXPIRE', key, msarg) end
        a = tonumber(msarg)
      end
    end
    out[o+1], out[o+2] = a, res
  end
  o = o + 2
end

------------------------------------------- fixed and sliding, any callers

-- F, S and s: a fixed (F) or sliding (S) window with n callers and their
-- costs, or a sliding one with one caller of cost 1 (s). ARGV: limit
-- (hex), window ms, and for F and S n and the costs (hex). All the costs
-- are added with one INCRBY, and the refused ones taken back.
local function window(key, kind, i)
  local limit, msarg = argv[i+1], argv[i+2]
  if limit ~= limitArg then limitArg, limitNum = limit, tonumber(limit, 16) end
  limit = limitNum
  local sliding, n, total, costs = kind == 's' or kind == 'S', 1, 1, nil
  if kind ~= 's' then
    costs, n = readCosts()
    total = 0
    for j = 1, n do total = total + costs[j] end
  end
  local ms, a, prev, curkey = tonumber(msarg), 0, 0, key
  if sliding then
    local index
    curkey, a, index = slidingNow(key, msarg, ms)
    prev = pcall('GET', slidingKey(key, msarg, index - 1))
    if type(prev) == 'table' then
      local e = failed(prev)
      if e then return e end
      prev = nil
    elseif prev then prev = tonumber(prev) else prev = 0 end
  end
  local after = nil
  if prev ~= nil then
    local by = total
    if by == 1 then by = '1' end -- redis.call formats a number with printf
    after = pcall('INCRBY', curkey, by)
    if type(after) == 'table' then
      local e = failed(after)
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
    local count, weight = after - total, 0
    local start = count
    if sliding then weight = prev * (ms - a) / ms end
    for j = 1, n do
      local c = 1
      if costs then c = costs[j] end
      if weight + count + c <= limit then
        count = count + c
        out[o+head+j] = count
      else
        out[o+head+j] = -count - 1
      end
    end
    if count == 0 then
      call('DEL', curkey)
    elseif count < after then
      call('DECRBY', curkey, after - count)
    end
    if sliding then
      if start == 0 and count > 0 then call('PEXPIRE', curkey, 2 * ms - a) end
      out[o+2] = prev
    elseif start == 0 then
      if count > 0 then call('PEXPIRE', curkey, msarg) end
      a = ms
    else
      a = expiresIn(curkey, msarg)
    end
    out[o+1] = a
  end
  o = o + head + n
end
