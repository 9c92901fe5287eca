#!/bin/sh
# Alternated A/B on one machine in one sitting: pgtyped = fb6a2f9, ramp = a PostgreSQL fan-out whose first part is 100 children
# (release builds copied to
# /tmp/flare-pgtyped and /tmp/flare-ramp). `flare bench fan-in --children 10000` on SQLite and
# PostgreSQL, six rounds of three repetitions. `python3 summary.py` prints summary.txt.
cd "$(dirname "$0")"
for round in 1 2 3 4 5 6; do
  for v in pgtyped ramp; do
    RUST_LOG=error /tmp/flare-$v bench fan-in --children 10000 --reps 3 --json \
      --database-url postgres://postgres@127.0.0.1:5432/postgres > both-$v-$round.jsonl
  done
done
