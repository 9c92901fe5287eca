#!/bin/sh
# The send rates beside 100,000 waiting runs with the set of waited values (release build of
# its commit, copied to /tmp/vs/flare-vs2): SQLite with scattered keys (five repetitions) and
# consecutive keys (three), PostgreSQL with scattered keys (three; its code is unchanged).
cd "$(dirname "$0")"
PG=postgres://postgres@127.0.0.1:5432/postgres
B=/tmp/vs/flare-vs2
RUST_LOG=error $B bench waiters --events 100000 --reps 5 --json --scattered-keys > waiters-sqlite-scattered.jsonl
RUST_LOG=error $B bench waiters --events 100000 --reps 3 --json > waiters-sqlite-consecutive.jsonl
RUST_LOG=error $B bench waiters --events 100000 --reps 3 --json --scattered-keys --database-url $PG \
  | grep postgres > waiters-postgres-scattered.jsonl
