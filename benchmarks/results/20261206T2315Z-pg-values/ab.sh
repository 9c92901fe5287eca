#!/bin/sh
# Alternated rounds: the build before (flare-base, 2c5a7b2) and with the PostgreSQL sets (flare-pgset),
# `bench waiters` with scattered keys on SQLite and PostgreSQL, one repetition each per round.
PG=postgres://postgres@127.0.0.1:5432/postgres
for round in $(seq 1 ${ROUNDS:-3}); do
  for b in base pgset; do
    RUST_LOG=error /tmp/vs/flare-$b bench waiters --events 100000 --reps 1 --json --scattered-keys --database-url $PG >> ab-$b.jsonl
    echo "$(date -u +%H:%M:%S) round $round $b done" >> progress.txt
  done
done
