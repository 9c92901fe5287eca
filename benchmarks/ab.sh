# Sourced by the scripts of benchmarks/results/*/: `flare bench` with two release builds
# alternated in one sitting, each run's JSON on one line in the script's directory. FLARE: the
# build after (default: this tree's release build); BEFORE: the build before.
set -euo pipefail
cd "$(dirname "$0")"
flare=${FLARE:-../../../target/release/flare}
before=${BEFORE:-}

# ab_split <rounds> <bench args…>: before.jsonl and after.jsonl, one line per run; the build
# before goes first in odd rounds, the build after in even ones.
ab_split() {
  local rounds=$1 i; shift
  : "${before:?BEFORE: the release binary of the build before}"
  for i in $(seq "$rounds"); do
    if (( i % 2 )); then ab_one "$before" before.jsonl "$@"; ab_one "$flare" after.jsonl "$@"
    else ab_one "$flare" after.jsonl "$@"; ab_one "$before" before.jsonl "$@"; fi
  done
}

# ab_tagged <file> <rounds> <bench args…>: each round the build before, then the build after,
# one line each in <file>: {"build": "before" | "after", "result": <the bench's first JSON>}.
ab_tagged() {
  local file=$1 rounds=$2 i b bin; shift 2
  : "${before:?BEFORE: the release binary of the build before}"
  for i in $(seq "$rounds"); do
    for b in before after; do
      bin=$before; [[ $b == after ]] && bin=$flare
      printf '{"build":"%s","result":' "$b" >> "$file"
      RUST_LOG=error "$bin" bench "$@" 2>/dev/null | python3 -c 'import json,sys; print(json.dumps(json.JSONDecoder().raw_decode(sys.stdin.read().strip())[0]), end="")' >> "$file"
      echo '}' >> "$file"
    done
  done
}

# ab_one <binary> <file> <bench args…>: one run, its JSON on one line appended to <file>.
ab_one() {
  local bin=$1 file=$2; shift 2
  RUST_LOG=error "$bin" bench "$@" 2>/dev/null | tr -d '\n' >> "$file"; echo >> "$file"
}
