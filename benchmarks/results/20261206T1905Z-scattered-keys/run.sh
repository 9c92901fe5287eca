#!/bin/sh
# The send rates beside 100,000 waiting runs with consecutive and with scattered keys, three
# repetitions each, SQLite and PostgreSQL (release build of the commit adding --scattered-keys,
# copied to /tmp/flare-sk).
cd "$(dirname "$0")"
PG=postgres://postgres@127.0.0.1:5432/postgres
for k in consecutive scattered; do
  flag=""; [ $k = scattered ] && flag=--scattered-keys
  RUST_LOG=error /tmp/flare-sk bench waiters --events 100000 --reps 3 --json $flag \
    --database-url $PG > waiters-$k.jsonl
done
