#!/bin/sh
# One repetition of the waiters bench with PostgreSQL's auto_explain sampling 2% of the
# statements of role postgres (plans with actual times and buffers in the server log); the
# role's settings are reset afterwards. $1: the binary; $2: where the log's new lines go.
LOG=/var/log/postgresql/postgresql-15-main.log
L0=$(wc -l < $LOG)
psql -q -U postgres -h 127.0.0.1 postgres \
  -c "ALTER ROLE postgres SET session_preload_libraries = 'auto_explain'" \
  -c "ALTER ROLE postgres SET auto_explain.log_min_duration = 0" \
  -c "ALTER ROLE postgres SET auto_explain.log_analyze = on" \
  -c "ALTER ROLE postgres SET auto_explain.log_buffers = on" \
  -c "ALTER ROLE postgres SET auto_explain.sample_rate = 0.02"
RUST_LOG=error "$1" bench waiters --events 100000 --reps 1 --json --scattered-keys \
  --database-url postgres://postgres@127.0.0.1:5432/postgres
psql -q -U postgres -h 127.0.0.1 postgres -c "ALTER ROLE postgres RESET ALL"
tail -n +"$L0" $LOG > "$2"
