#!/bin/sh
# The plain drain of 50,000 on SQLite again, base against final, rounds 4-9 (ab.sh's three
# rounds read 0.95 paired).
cd "$(dirname "$0")"
for round in 4 5 6 7 8 9; do
  for v in base final; do
    RUST_LOG=error /tmp/flare-$v bench drain --events 50000 --reps 3 --json > drain-$v-$round.jsonl
  done
done
