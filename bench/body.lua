-- wrk script: POST one pre-built body file (BODY) with content type CT, e.g. the NDJSON and
-- frames bodies written by `cargo run --release -p vx-proto --example bench_bodies -- DIR`.
local f = assert(io.open(os.getenv("BODY"), "rb"))
local body = f:read("*all")
f:close()
wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = os.getenv("CT") or "application/x-ndjson"
