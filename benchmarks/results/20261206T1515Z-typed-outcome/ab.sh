#!/bin/sh
# Alternated A/B on one machine in one sitting: base = ab9fec4, typed = an invoke step's ended
# child read typed for the replay (release builds copied to /tmp/flare-base and
# /tmp/flare-typed). `flare bench fan-in --children 10000` on SQLite, twelve rounds of five
# repetitions. `summary.py` prints summary.txt.
cd "$(dirname "$0")"
for round in 1 2 3 4 5 6 7 8 9 10 11 12; do
  for v in base typed; do
    RUST_LOG=error /tmp/flare-$v bench fan-in --children 10000 --reps 5 --json > sqlite-$v-$round.jsonl
  done
done
