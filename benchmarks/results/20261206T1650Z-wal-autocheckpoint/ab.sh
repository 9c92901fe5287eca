#!/bin/sh
# SQLite's automatic checkpoint every 1,000 (its default), 4,000 and 16,000 WAL pages,
# alternated: four rounds of four repetitions of `flare bench fan-in --children 10000`.
cd "$(dirname "$0")"
for round in 1 2 3 4; do for v in 1000 4000 16000; do
  XP_WAL_AUTOCHECKPOINT=$v RUST_LOG=error /tmp/flare-xp bench fan-in --children 10000 --reps 4 --json > ck-$v-$round.jsonl
done; done
