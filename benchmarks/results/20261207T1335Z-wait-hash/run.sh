#!/usr/bin/env bash
# Issue 27, twenty-fourth sitting: `flare bench waiters` with scattered keys, the build before
# (BEFORE: `run_waits_match` on the three texts and the primary key) and after (FLARE: on a hash
# of the three and the row id, `0056_wait_match_hash.sql`) alternated run by run on SQLite.
# PostgreSQL's code did not change (postgres.sh). One JSON line per run: before.jsonl, after.jsonl.
source "$(dirname "$0")/../../ab.sh"
ab_split 4 waiters --events 100000 --reps 1 --json --scattered-keys
