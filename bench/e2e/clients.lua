-- wrk script: GET /v1/notes/1 from 10 000 client addresses, in the
-- X-Forwarded-For header the example trusts (-trusted-header
-- X-Forwarded-For -trusted-hops 1), so that every request is on the allowed
-- path of the example's global limit (100 per 60 s per client).
local n = 0
request = function()
  n = n + 1
  local i = n % 10000
  return wrk.format("GET", "/v1/notes/1", {["X-Forwarded-For"] = "10.0." .. math.floor(i / 250) .. "." .. (i % 250 + 1)})
end
