#!/bin/sh
# One repetition of each hack.sh arm under `perf record -a` (whole machine), PostgreSQL only.
PG=postgres://postgres@127.0.0.1:5432/postgres
for v in probe noprobe; do
  if [ $v = noprobe ]; then E="FLARE_HACK_NOPROBE=1"; else E="X=1"; fi
  env $E FLARE_BENCH_PG_ONLY=1 RUST_LOG=error perf record -a -F 499 -o perf-$v.data -q -- \
    /tmp/vs/flare-hack bench waiters --events 100000 --reps 1 --json --scattered-keys --database-url $PG > perf-$v.jsonl
done
