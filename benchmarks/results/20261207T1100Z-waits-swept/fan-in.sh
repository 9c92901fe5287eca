#!/usr/bin/env bash
# The fan-in of 10,000 children on SQLite, before and after, alternated: its SQLite children
# keep no wait rows, but its parent's due check now passes over marked ones. fan-in.jsonl:
# one line per run, tagged with the build.
source "$(dirname "$0")/../../ab.sh"
ab_tagged fan-in.jsonl 2 fan-in --children 10000 --reps 3 --json
