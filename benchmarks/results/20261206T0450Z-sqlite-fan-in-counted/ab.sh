#!/bin/sh
# Alternated A/B of `flare bench fan-in --children 10000` on the same machine in one sitting:
# base = f7c1bc0 (a wait row per child), final = 7f33d21 (children counted, no wait row per
# child, SQLite). Release builds copied to /tmp/flare-base and /tmp/flare-final.
# SQLite: ten rounds of three repetitions each; PostgreSQL (unchanged code): two rounds.
cd "$(dirname "$0")"
for round in 1 2 3 4 5 6 7 8 9 10; do
  for v in base final; do
    RUST_LOG=error /tmp/flare-$v bench fan-in --children 10000 --reps 3 --json > sqlite-$v-$round.jsonl
  done
done
for round in 1 2; do
  for v in base final; do
    RUST_LOG=error /tmp/flare-$v bench fan-in --children 10000 --reps 3 --json \
      --database-url postgres://postgres@127.0.0.1:5432/postgres > pg-$v-$round.jsonl
  done
done
