---------------------------------------------------------------- in flight

-- i: take slots in flight. ARGV: limit (hex), lease ms, token, cost (hex).
-- The key is a sorted set of slots scored by their lease's end. Returns
-- how many ended leases were dropped, and the slots used after, or
-- -used-1.
local function inflight(key, kind, i)
  local limit, msarg, tok, c = argv[i+1], argv[i+2], argv[i+3], argv[i+4]
  limit, c = tonumber(limit, 16), tonumber(c, 16)
  now = now or clock()
  local x = pcall('ZREMRANGEBYSCORE', key, '-inf', now)
  if type(x) == 'table' then
    local e = failed(x)
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
end

-- y: give back a request's slots in flight. ARGV: token, cost (hex).
-- Returns how many were still there.
local function inflightBack(key, kind, i)
  local tok, c = argv[i+1], argv[i+2]
  c = tonumber(c, 16)
  local gone, ms = 0, {tok}
  for i = 2, c + 1 do
    if #ms >= 1000 or i > c then
      local r = pcall('ZREM', key, unpack(ms))
      if type(r) == 'table' then
        local e = failed(r)
        if e then return e end
        gone = -3
        break
      end
      gone, ms = gone + r, {}
    end
    if i <= c then ms[#ms+1] = tok .. '.' .. i end
  end
  out[o+1], o = gone, o + 1
end
