#!/bin/sh
# Issue 27's figures in one sitting: the fan-in of 10,000 children beside its plain drain, three
# times five repetitions on each store, then the send rates beside 100,000 waiting runs, three
# repetitions on each store. Release build of 84b2034, copied to /tmp/flare-head.
cd "$(dirname "$0")"
PG=postgres://postgres@127.0.0.1:5432/postgres
for i in 1 2 3; do
  RUST_LOG=error /tmp/flare-head bench fan-in --children 10000 --reps 5 --json \
    --database-url $PG > fan-in-$i.jsonl
done
RUST_LOG=error /tmp/flare-head bench waiters --events 100000 --reps 3 --json \
  --database-url $PG > waiters.jsonl
# Then (18:08-18:11 UTC, when-sqlite-waiters.txt), SQLite only, twice:
#   RUST_LOG=error /tmp/flare-head bench waiters --events 100000 --reps 3 --json > waiters-sqlite-$i.jsonl
