#!/bin/sh
# As ab.sh, with the change first in each round (ab.sh ran the old build first).
cd "$(dirname "$0")"
for round in 1 2 3; do
  for b in vs old; do
    RUST_LOG=error /tmp/vs/flare-$b bench waiters --events 100000 --reps 1 --json --scattered-keys \
      >> ab-$b.jsonl
  done
done
