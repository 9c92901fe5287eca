#!/bin/sh
# PostgreSQL beside ab.sh: base and typed alternated, three rounds of three repetitions.
cd "$(dirname "$0")"
for round in 1 2 3; do
  for v in base typed; do
    RUST_LOG=error /tmp/flare-$v bench fan-in --children 10000 --reps 3 --json \
      --database-url postgres://postgres@127.0.0.1:5432/postgres > pg-$v-$round.jsonl
  done
done
