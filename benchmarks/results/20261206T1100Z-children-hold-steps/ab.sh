#!/bin/sh
# Alternated A/B on the same machine in one sitting: base = 9498505, final = 044e9e4 (on SQLite
# an invoked child holds its caller's step: no run_steps row per child). Release builds copied
# to /tmp/flare-base and /tmp/flare-final. `flare bench fan-in --children 10000`: SQLite eight
# rounds of five repetitions; with PostgreSQL (which runs SQLite too; its store did not change)
# two rounds of three. The plain drain of 50,000 on SQLite (its run insert binds three more
# columns): three rounds.
cd "$(dirname "$0")"
for round in 1 2 3 4 5 6 7 8; do
  for v in base final; do
    RUST_LOG=error /tmp/flare-$v bench fan-in --children 10000 --reps 5 --json > sqlite-$v-$round.jsonl
  done
done
for round in 1 2; do
  for v in base final; do
    RUST_LOG=error /tmp/flare-$v bench fan-in --children 10000 --reps 3 --json \
      --database-url postgres://postgres@127.0.0.1:5432/postgres > pg-$v-$round.jsonl
  done
done
for round in 1 2 3; do
  for v in base final; do
    RUST_LOG=error /tmp/flare-$v bench drain --events 50000 --reps 3 --json > drain-$v-$round.jsonl
  done
done
