#!/usr/bin/env bash
# Issue 27, twenty-third sitting: `flare bench waiters` with scattered keys, the build before
# (BEFORE: waits deleted as they are resumed) and after (FLARE: marked, swept together)
# alternated run by run on SQLite; then PostgreSQL, whose waits are deleted as before, with the
# new build. One JSON line per run: before.jsonl, after.jsonl, postgres.jsonl.
set -euo pipefail
cd "$(dirname "$0")"
flare=${FLARE:-../../../target/release/flare}
before=${BEFORE:?the release binary of the build before, e.g. a worktree of 37d79ca}
export RUST_LOG=error
one() { "$1" bench waiters --events 100000 --reps 1 --json --scattered-keys "${@:3}" 2>/dev/null | tr -d '\n' >> "$2"; echo >> "$2"; }
for i in 1 2 3 4; do
  if (( i % 2 )); then one "$before" before.jsonl; one "$flare" after.jsonl
  else one "$flare" after.jsonl; one "$before" before.jsonl; fi
done
for i in 1 2; do
  one "$flare" postgres.jsonl --database-url postgres://postgres@127.0.0.1:5432/postgres
done
