#!/bin/sh
# Alternated A/B on the same machine in one sitting: base = 1fc5993, final = 999985e (a
# fan-out's payloads reach the store as JSON text, SQLite's invoke steps store no {runId}, an
# ended child's outcome built without copies, the completer runs before a finished execution's
# steps are dropped). Release builds copied to /tmp/flare-base and /tmp/flare-final.
# `flare bench fan-in --children 10000`: SQLite eight rounds of five repetitions; with
# PostgreSQL (which runs SQLite too) three rounds of three. The plain drain of 50,000 (the
# completer's change touches every run): three rounds on each store.
cd "$(dirname "$0")"
for round in 1 2 3 4 5 6 7 8; do
  for v in base final; do
    RUST_LOG=error /tmp/flare-$v bench fan-in --children 10000 --reps 5 --json > sqlite-$v-$round.jsonl
  done
done
for round in 1 2 3; do
  for v in base final; do
    RUST_LOG=error /tmp/flare-$v bench fan-in --children 10000 --reps 3 --json \
      --database-url postgres://postgres@127.0.0.1:5432/postgres > pg-$v-$round.jsonl
  done
done
for round in 1 2 3; do
  for v in base final; do
    RUST_LOG=error /tmp/flare-$v bench drain --events 50000 --reps 3 --json \
      --database-url postgres://postgres@127.0.0.1:5432/postgres > drain-$v-$round.jsonl
  done
done
