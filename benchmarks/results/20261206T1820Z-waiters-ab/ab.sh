#!/bin/sh
# SQLite's matching events beside 100,000 waiting runs, the eighth sitting's build (894fef9,
# /tmp/flare-894fef9) and this session's head (84b2034, /tmp/flare-head) alternated, one
# repetition each, six rounds.
cd "$(dirname "$0")"
for i in 1 2 3 4 5 6; do
  for b in 894fef9 head; do
    RUST_LOG=error /tmp/flare-$b bench waiters --events 100000 --reps 1 --json | sed "s/^/$b /" >> waiters.txt
  done
done
