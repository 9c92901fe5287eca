#!/bin/bash
# One sender (batches of one event: a quiet sender), 20,000 waits: the shipped build before, the
# hash key, and the hash key with its keys padded to 10; alternated, one repetition each.
for round in 1 2; do
  for b in base hash pad; do
    bin=/tmp/vs/flare-exp; [ $b = hash ] && bin=/tmp/vs/flare-hash; [ $b = pad ] && bin=/tmp/vs/flare-pad
    out=$(FLARE_BENCH_PG_ONLY=1 RUST_LOG=error $bin bench waiters --events 5000 --waiters 20000 --e2e-senders 1 --reps 1 --json --scattered-keys \
      --database-url postgres://postgres@127.0.0.1:5432/postgres 2>/dev/null | grep '^{' | tail -1)
    echo "{\"build\": \"$b\", \"round\": $round, \"at\": \"$(date -u +%H:%M)\", \"result\": $out}" >> quiet.jsonl
  done
done
