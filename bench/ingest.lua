-- wrk script: POST NDJSON batches of BATCH events (default 1000) spread over STREAMS streams.
-- Bodies are built once at start-up and rotated, so the load generator spends its CPU on I/O.
-- Counts only 200 responses as ingested (wrk's "Non-2xx" line shows refusals).
local batch = tonumber(os.getenv("BATCH") or "1000")
local streams = tonumber(os.getenv("STREAMS") or "100")
local bodies = {}
local nbodies = 8

function init(args)
  local tid = math.random(1, 1e9)
  for b = 1, nbodies do
    local lines = {}
    for i = 1, batch do
      local s = (b * batch + i) % streams
      lines[i] = string.format(
        '{"stream":"bench-%d","entity":"player-%d","type":"damage","ts":%d,"kind":"counter","value":%d,"data":{"weapon":"bow","n":%d}}',
        s, (i * 7) % 1000, 1732000000000 + i, i % 50, i)
    end
    bodies[b] = table.concat(lines, "\n") .. "\n"
  end
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/x-ndjson"
end

local n = 0
function request()
  n = n + 1
  return wrk.format(nil, "/v1/events", nil, bodies[(n % nbodies) + 1])
end
