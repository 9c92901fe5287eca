#!/usr/bin/env bash
# The multi-process PostgreSQL benchmark: for each number of `flare worker` processes and each
# repetition, a fresh database (so dead rows of earlier repetitions cost nothing), one
# `flare bench pg-scale` repetition (drain + latency). One JSON line per figure on stdout.
#
#   benchmarks/pg-scale.sh > results.jsonl
#
# Env: PG (server URL without database, default postgres://postgres@127.0.0.1:5432), WORKERS
# ("1 2 4"), REPS (3), EVENTS (100000), RATE (200), SECS (10), FLARE (target/release/flare).
set -euo pipefail
PG="${PG:-postgres://postgres@127.0.0.1:5432}"
FLARE="${FLARE:-target/release/flare}"
for n in ${WORKERS:-1 2 4}; do
  for rep in $(seq "${REPS:-3}"); do
    db="flare_pgscale_$$"
    psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >&2
    RUST_LOG=error "$FLARE" bench pg-scale --database-url "$PG/$db" --workers "$n" --reps 1 \
      --events "${EVENTS:-100000}" --latency-rate "${RATE:-200}" --latency-secs "${SECS:-10}" --json
    psql "$PG/postgres" -qc "DROP DATABASE $db WITH (FORCE)" >&2
  done
done
