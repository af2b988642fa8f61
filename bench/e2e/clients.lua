-- wrk script: GET /v1/notes/1 from 100 000 client addresses, in the
-- X-Forwarded-For header the example trusts (-trusted-header
-- X-Forwarded-For -trusted-hops 1), so that every request is on the allowed
-- path of the example's global limit (100 per 60 s per client): a whole
-- run.sh of the defaults sends about 20 requests per address.
local n = 0
request = function()
  n = n + 1
  local i = n % 100000
  local a = "10." .. math.floor(i / 65536) .. "." .. (math.floor(i / 256) % 256) .. "." .. (i % 256)
  return wrk.format("GET", "/v1/notes/1", {["X-Forwarded-For"] = a})
end
