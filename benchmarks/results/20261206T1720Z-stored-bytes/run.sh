#!/bin/sh
# What a fan-in and its plain drain leave stored, beside their rates: `flare bench fan-in` with
# `stored_mb` / `vs_drain_stored` (release build of the commit that added them, copied to
# /tmp/flare-mb), SQLite and PostgreSQL, five repetitions each. Then the system calls of one
# SQLite repetition of each (the fan-in bench runs its plain drain too: subtract the drain's).
cd "$(dirname "$0")"
RUST_LOG=error /tmp/flare-mb bench fan-in --children 10000 --reps 5 --json \
  --database-url postgres://postgres@127.0.0.1:5432/postgres > fan-in.jsonl
RUST_LOG=error strace -f -c -e trace=pwrite64,pread64,fsync -o strace-fan-in.txt \
  /tmp/flare-mb bench fan-in --children 10000 --reps 1 > /dev/null 2>&1
RUST_LOG=error strace -f -c -e trace=pwrite64,pread64,fsync -o strace-drain.txt \
  /tmp/flare-mb bench drain --events 10000 --reps 1 > /dev/null 2>&1
