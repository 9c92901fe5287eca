#!/usr/bin/env bash
# One A/B arm of a PostgreSQL schema experiment: a fresh database migrated by Flare, then an
# optional SQL file applied by hand (the change under test, e.g. an index dropped), then one
# `flare bench pg-scale` repetition (drain + latency). Prints the two figures of interest.
#
#   benchmarks/pg-ab.sh NAME [SQL-FILE] [EVENTS]      # W=2 for two workers
#
# Env: PG (server URL without database), W (worker processes, 1), FLARE (target/release/flare).
set -euo pipefail
name="${1:?usage: pg-ab.sh NAME [SQL-FILE] [EVENTS]}"
PG="${PG:-postgres://postgres@127.0.0.1:5432}"
FLARE="${FLARE:-target/release/flare}"
db="flare_ab_$name"
psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" 2>/dev/null
bench() {
  RUST_LOG=error "$FLARE" bench pg-scale --database-url "$PG/$db" --workers "${W:-1}" --reps 1 --json "$@"
}
bench --events 1000 --latency-rate 10 --latency-secs 1 >/dev/null 2>&1   # migrates
if [ -n "${2:-}" ]; then psql "$PG/$db" -q -f "$2"; fi
psql "$PG/$db" -qc "VACUUM ANALYZE"
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
lsn() { psql "$PG/postgres" -Atc "SELECT pg_current_wal_lsn()"; }
before=$(busy) lsn0=$(lsn)
out=$(bench --events "${3:-200000}" --latency-rate 200 --latency-secs 3 2>/dev/null)
cpu_s=$(awk -v a="$before" -v b="$(busy)" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", (b - a) / hz }')
echo "$out" | python3 -c "
import json, sys
print('$name', 'cpu_s', $cpu_s, 'wal_mb', $(psql "$PG/postgres" -Atc "SELECT round(pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn0') / 1e6)"))
for line in sys.stdin:
    d = json.loads(line)
    m = d['median']
    print('$name', d['scenario'], {k: round(v, 2) for k, v in m.items()
          if k in ('runs_per_s', 'p50_ms', 'p99_ms', 'load1')})"
psql "$PG/postgres" -qc "DROP DATABASE $db WITH (FORCE)"
