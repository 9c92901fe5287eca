#!/usr/bin/env bash
# The fan-in of 10,000 children on SQLite, before and after, alternated: its SQLite children
# keep no wait rows, but its parent's due check now passes over marked ones. fan-in.jsonl:
# one line per run, tagged with the build.
set -euo pipefail
cd "$(dirname "$0")"
flare=${FLARE:-../../../target/release/flare}
before=${BEFORE:?the release binary of the build before}
export RUST_LOG=error
for i in 1 2; do
  for b in before after; do
    bin=$before; [[ $b == after ]] && bin=$flare
    printf '{"build":"%s","result":' "$b" >> fan-in.jsonl
    "$bin" bench fan-in --children 10000 --reps 3 --json 2>/dev/null | python3 -c 'import json,sys; print(json.dumps(json.JSONDecoder().raw_decode(sys.stdin.read().strip())[0]), end="")' >> fan-in.jsonl
    echo '}' >> fan-in.jsonl
  done
done
