#!/bin/sh
# Alternated A/B of `flare bench fan-in --children 10000` on the same machine in one sitting:
# base = 483d562 (a child's end found its caller's step through the index run_steps_child),
# final = 4c65773 (the child names its caller in its row, returned by the statement that ends
# it; the parent's read of its steps with fewer copies). Release builds copied to
# /tmp/flare-base and /tmp/flare-final. SQLite: ten rounds of three repetitions each;
# PostgreSQL (store code unchanged; the engine's replay changed): two rounds.
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
