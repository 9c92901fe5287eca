#!/bin/sh
# After ab.sh: its final yielded after every completion, which cost the plain drain on SQLite
# about a tenth; fef8780 yields only after an execution that read 1,000 steps or more. base =
# 1fc5993 (/tmp/flare-base), final2 = fef8780 (/tmp/flare-final2), `flare bench drain --events
# 50000 --reps 3` on SQLite, four alternated rounds.
cd "$(dirname "$0")"
for round in 1 2 3 4; do
  for v in base final2; do
    RUST_LOG=error /tmp/flare-$v bench drain --events 50000 --reps 3 --json > drain2-$v-$round.jsonl
  done
done
# Then PostgreSQL (the run also drains SQLite), three alternated rounds.
for round in 1 2 3; do
  for v in base final2; do
    RUST_LOG=error /tmp/flare-$v bench drain --events 50000 --reps 3 --json \
      --database-url postgres://postgres@127.0.0.1:5432/postgres > drain3-$v-$round.jsonl
  done
done
