-- period(kind, now) returns the start and the end of the UTC day ('d')
-- or month ('m') that holds now, all in milliseconds since 1970-01-01
-- UTC. The month is found from the day number by H. Hinnant's
-- civil-from-days algorithm, in a year that starts on the 1st of March,
-- so that February, the only month whose length varies, is the year's
-- last. window.Period does the same in Go, and a test runs both for every
-- day from 1970 to 2100. take.lua includes it where it says so.
local function period(kind, now)
  local floor = math.floor
  local day = floor(now / 86400000)
  if kind == 'd' then return day * 86400000, (day + 1) * 86400000 end
  local z = day + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local first = day - (doy - floor((153 * mp + 2) / 5))
  local len
  if mp < 11 then
    len = floor((153 * mp + 155) / 5) - floor((153 * mp + 2) / 5)
  else
    local y = yoe + era * 400 + 1
    len = 28
    if y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0) then len = 29 end
  end
  return first * 86400000, (first + len) * 86400000
end
