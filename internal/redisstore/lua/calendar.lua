-- period(kind, now) returns the start and the end of the UTC day ('d'),
-- ISO week ('w', from Monday), month ('m') or year ('y') that holds now,
-- all in milliseconds since 1970-01-01 UTC. The month and the year are
-- found from the day number by H. Hinnant's civil-from-days algorithm, in
-- a year that starts on the 1st of March, so that February, the only
-- month whose length varies, is the year's last. window.Period does the
-- same in Go, and a test runs both for every day from 1970 to 2100.
-- A function's body, unlike the library's, runs with Lua's globals.
local function period(kind, now)
  local floor = math.floor
  local day = floor(now / 86400000)
  if kind == 'd' then return day * 86400000, (day + 1) * 86400000 end
  if kind == 'w' then
    -- 1970-01-01, day 0, was a Thursday: three days after a Monday.
    local first = day - (day + 3) % 7
    return first * 86400000, (first + 7) * 86400000
  end
  local z = day + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  -- The civil year: January and February (mp 10 and 11) belong to the
  -- year after the one whose March began the count.
  local y = yoe + era * 400
  if mp >= 10 then y = y + 1 end
  local leap = 0
  if y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0) then leap = 1 end
  local first, len
  if kind == 'y' then
    -- Day 306 of the count is the 1st of January after its March.
    first, len = day - doy + 306, 365 + leap
    if mp < 10 then first = first - len end
  else
    first = day - (doy - floor((153 * mp + 2) / 5))
    if mp < 11 then
      len = floor((153 * mp + 155) / 5) - floor((153 * mp + 2) / 5)
    else
      len = 28 + leap
    end
  end
  return first * 86400000, (first + len) * 86400000
end
