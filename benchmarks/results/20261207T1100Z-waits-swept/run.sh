#!/usr/bin/env bash
# Issue 27, twenty-third sitting: `flare bench waiters` with scattered keys, the build before
# (BEFORE: waits deleted as they are resumed) and after (FLARE: marked, swept together)
# alternated run by run on SQLite; then PostgreSQL, whose waits are deleted as before, with the
# new build. One JSON line per run: before.jsonl, after.jsonl, postgres.jsonl.
source "$(dirname "$0")/../../ab.sh"
ab_split 4 waiters --events 100000 --reps 1 --json --scattered-keys
for i in 1 2; do
  ab_one "$flare" postgres.jsonl waiters --events 100000 --reps 1 --json --scattered-keys \
    --database-url postgres://postgres@127.0.0.1:5432/postgres
done
