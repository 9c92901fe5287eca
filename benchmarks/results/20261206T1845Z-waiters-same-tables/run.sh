#!/bin/sh
# SQLite's matching events beside 100,000 waiting runs against beside 10,000, with the
# few-waiters database taking the same sends as the other before its matching events (release
# build of this change, /tmp/flare-fair), six repetitions.
cd "$(dirname "$0")"
RUST_LOG=error /tmp/flare-fair bench waiters --events 100000 --reps 6 --json > waiters.jsonl
