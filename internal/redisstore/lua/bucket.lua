------------------------------------------------------------- token bucket

-- b and B: a token bucket, decided as GCRA (window/bucket.go). ARGV: the
-- interval (µs per unit, decimal), the most µs the bucket may be behind
-- now, the key's expiry in ms (0: work it out) and, for B, n and the
-- costs. The key holds the theoretical arrival time (TAT) in µs. Returns
-- a = 0 and, per caller, the µs until full, or -that-1.
local function bucket(key, kind, i)
  local iv, most, px = argv[i+1], argv[i+2], argv[i+3]
  iv, most = tonumber(iv), tonumber(most)
  local n, costs = 1, nil
  if kind == 'B' then
    costs, n = readCosts()
  end
  now = now or clock()
  local v, tat = pcall('GET', key), nil
  if type(v) == 'table' then
    local e = failed(v)
    if e then return e end
  else
    tat = tonumber(v or 0)
  end
  if tat == nil then
    out[o+1] = -3
    for j = 2, n + 1 do out[o+j] = 0 end
  else
    local left = max(tat - nowus, 0)
    local start = left
    for j = 1, n do
      local c = 1
      if costs then c = costs[j] end
      if left + c * iv <= most then
        left = left + c * iv
        out[o+1+j] = ceil(left)
      else
        out[o+1+j] = -ceil(left) - 1
      end
    end
    if left > start then
      if px == '0' then px = ceil(left / 1000) + 1 end
      call('SET', key, nowus + left, 'PX', px)
    end
    out[o+1] = 0
  end
  o = o + 1 + n
end
