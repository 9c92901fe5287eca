#!/bin/bash
# usage: pgss.sh <binary> <modes>  — one experiment run, then the server's time per statement
psql -U postgres -h 127.0.0.1 -Atc "select pg_stat_statements_reset()" >/dev/null
FLARE_EXP_MODES=$2 FLARE_EXP_ROUNDS=20 FLARE_BENCH_PG_ONLY=1 RUST_LOG=error $1 bench waiters --events 100000 --reps 1 --json --scattered-keys --database-url postgres://postgres@127.0.0.1:5432/postgres 2>&1 | grep -a "EXP"
psql -U postgres -h 127.0.0.1 -c "select calls, round((total_exec_time/greatest(calls,1)*1000)::numeric,1) exec_us, round((total_plan_time/greatest(calls,1)*1000)::numeric,1) plan_us, plans, round(shared_blks_hit::numeric/greatest(calls,1),1) blk, left(regexp_replace(query,'\s+',' ','g'),60) q from pg_stat_statements where calls > 10000 order by total_exec_time+total_plan_time desc limit 12"
