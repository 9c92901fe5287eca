#!/usr/bin/env bash
# Two runs of the new build with PostgreSQL too (its code did not change in this sitting): each
# line of postgres.jsonl holds that run's SQLite figure, then PostgreSQL's.
source "$(dirname "$0")/../../ab.sh"
for i in 1 2; do
  ab_one "$flare" postgres.jsonl waiters --events 100000 --reps 1 --json --scattered-keys \
    --database-url postgres://postgres@127.0.0.1:5432/postgres
done
