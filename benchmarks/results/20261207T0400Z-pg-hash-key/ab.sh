#!/bin/bash
# Alternates the build before (`flare-exp` with no experiment switch: 99bd330 as shipped) and the
# hash-key build, PostgreSQL only; one JSON line per repetition in ab.jsonl, labelled.
for round in ${ROUNDS:-1 2 3}; do
  for b in ${BUILDS:-base hash}; do
    bin=/tmp/vs/flare-exp; [ $b = hash ] && bin=/tmp/vs/flare-hash; [ $b = hash2 ] && bin=/tmp/vs/flare-hash2; [ $b = pad ] && bin=/tmp/vs/flare-pad
    [ -n "$NO_PGSS" ] || psql -U postgres -h 127.0.0.1 -Atc "select pg_stat_statements_reset()" >/dev/null
    out=$(FLARE_BENCH_PG_ONLY=1 RUST_LOG=error $bin bench waiters --events 100000 --reps 1 --json --scattered-keys \
      --database-url postgres://postgres@127.0.0.1:5432/postgres 2>/dev/null | grep '^{' | tail -1)
    echo "{\"build\": \"$b\", \"round\": $round, \"at\": \"$(date -u +%H:%M)\", \"result\": $out}" >> ab.jsonl
    [ -n "$NO_PGSS" ] || psql -U postgres -h 127.0.0.1 -At -F ' ' -c "select '$b', calls, round((total_exec_time/calls*1000)::numeric,1), round(shared_blks_hit::numeric/calls,1) from pg_stat_statements where query like '%UNION ALL SELECT w.run_id%' or query like '%match_value = ANY%'" >> ab-statement.txt
  done
done
