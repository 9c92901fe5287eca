#!/bin/sh
# Is PostgreSQL planning the event writer's statements again at each batch? The build before the
# sets (2c5a7b2, as flare-hack without its switch) with every session on generic plans
# (`plan_cache_mode=force_generic_plan` in the URL's options) against the default; PostgreSQL only.
PG=postgres://postgres@127.0.0.1:5432/postgres
for round in 1 2; do
  for v in generic default; do
    case $v in
      generic) U="$PG?options=-c%20plan_cache_mode%3Dforce_generic_plan";;
      default) U="$PG";;
    esac
    FLARE_BENCH_PG_ONLY=1 RUST_LOG=error /tmp/vs/flare-hack bench waiters --events 100000 --reps 1 --json --scattered-keys --database-url "$U" >> generic-$v.jsonl
    echo "$(date -u +%H:%M:%S) round $round $v done" >> generic-progress.txt
  done
done
