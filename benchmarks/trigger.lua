-- wrk script for the POST /trigger benchmark (BENCHMARKS.md, "HTTP ingest").
-- Usage: wrk -t2 -c64 -d20s --latency -s benchmarks/trigger.lua http://127.0.0.1:3000/trigger
-- EVENT=user.created starts the two reference jobs per event; the default starts none.
local event = os.getenv("EVENT") or "bench.ingest"
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"event":"' .. event .. '","payload":{"userId":"u_1","email":"ada@example.com","name":"Ada"}}'

function done(summary, latency, requests)
  local codes = summary.errors
  io.write(string.format("non-2xx or socket errors: connect %d read %d write %d status %d timeout %d\n",
    codes.connect, codes.read, codes.write, codes.status, codes.timeout))
end
