#!/usr/bin/env bash
# Issue 27, twenty-second sitting: `flare bench waiters` with the matching phases alternated
# (15a4291), scattered keys, on SQLite (5 runs) and PostgreSQL (3 runs); one JSON line per run.
set -euo pipefail
cd "$(dirname "$0")"
flare=${FLARE:-../../../target/release/flare}
export RUST_LOG=error
for i in 1 2 3 4 5; do
  "$flare" bench waiters --events 100000 --reps 1 --json --scattered-keys 2>/dev/null | tr -d '\n' >> sqlite.jsonl
  echo >> sqlite.jsonl
done
for i in 1 2 3; do
  "$flare" bench waiters --events 100000 --reps 1 --json --scattered-keys \
    --database-url postgres://postgres@127.0.0.1:5432/postgres 2>/dev/null | tr -d '\n' >> postgres.jsonl
  echo >> postgres.jsonl
done
