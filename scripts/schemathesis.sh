#!/usr/bin/env bash
# Fuzzes Flare with schemathesis over the whole OpenAPI document that `flare serve` serves at
# /api/openapi.json (the JSON API, the ingest, webhook and compatible routes, the dashboard's
# pages and forms): for every documented operation it sends generated requests, valid and
# invalid, and fails on any 5xx and on answers whose status code, content type or body does not
# match the document. scripts/schemathesis.toml holds the answers that are right by design though
# a check would count them (the 501 of Trigger.dev v2 features Flare lacks). Results and how to
# read them: docs/schemathesis.md.
#
#   scripts/schemathesis.sh                  # build flare, start it, fuzz it, stop it
#   MAX_EXAMPLES=500 scripts/schemathesis.sh # more cases per operation (default 200)
#   scripts/schemathesis.sh --seed 1         # extra options go to `schemathesis run`
#
# Environment: MAX_EXAMPLES; FLARE_BIN, a flare binary to test instead of building one;
# SCHEMATHESIS_VENV, where the Python venv lives (default target/schemathesis-venv, created and
# filled from PyPI on the first run); REPORT_DIR (default target/schemathesis-report).
#
# Not run by .ci/run: its first run needs PyPI, and a run takes minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${SCHEMATHESIS_VENV:-target/schemathesis-venv}"
report_dir="${REPORT_DIR:-target/schemathesis-report}"
max_examples="${MAX_EXAMPLES:-200}"

if [ ! -x "$venv/bin/schemathesis" ]; then
    echo "schemathesis.sh: installing schemathesis into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'schemathesis>=4,<5'
fi

work="$(mktemp -d)"
server_pid=""
endpoint_pid=""
cleanup() {
    for pid in $server_pid $endpoint_pid; do
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${FLARE_BIN:-}" ]; then
    exe="$(cargo build --quiet --bin flare --message-format=json-render-diagnostics |
        python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["executable"])')"
    # Copied at once: the target directory may be shared with other checkouts.
    cp "$exe" "$work/flare"
    FLARE_BIN="$work/flare"
fi

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port="$(free_port)"
base="http://127.0.0.1:$port"

# The dependency-free example endpoint, so the endpoint routes have one to read, re-index and remove.
endpoint_port="$(free_port)"
endpoint_secret="whsec_$(python3 -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())')"
PORT="$endpoint_port" FLARE_ENDPOINT_SECRET="$endpoint_secret" \
    node examples/endpoint-protocol/server.mjs >"$work/endpoint.log" 2>&1 &
endpoint_pid=$!

# With an API key, so the document's bearer security is real and schemathesis can check that
# requests without it are refused; with the demo jobs, so there are jobs, runs and logs to read;
# with webhook secrets, so the webhook routes check signatures (unconfigured, they answer 503).
api_key="schemathesis-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
webhook_secret() {
    python3 -c 'import base64, os; print("whsec_" + base64.b64encode(os.urandom(32)).decode())'
}
env -u DATABASE_URL -u FLARE_ENDPOINTS -u FLARE_ENDPOINT_ALLOW \
    STRIPE_WEBHOOK_SECRET="$(webhook_secret)" CLERK_WEBHOOK_SECRET="$(webhook_secret)" \
    FLARE_API_KEY="$api_key" RUST_LOG=warn "$FLARE_BIN" serve --listen "127.0.0.1:$port" \
    --database-url "sqlite://$work/flare.db" --demo --shutdown-grace-secs 2 \
    >"$work/server.log" 2>&1 &
server_pid=$!

for _ in $(seq 1 100); do
    if curl -fsS "$base/healthz" >/dev/null 2>&1; then
        break
    fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "schemathesis.sh: flare serve exited:" >&2
        cat "$work/server.log" >&2
        exit 1
    fi
    sleep 0.1
done
curl -fsS "$base/healthz" >/dev/null

post() {
    curl -fsS -X POST "$base$1" -H "Authorization: Bearer $api_key" \
        -H 'Content-Type: application/json' -d "$2" >/dev/null
}
for _ in $(seq 1 50); do
    curl -s -o /dev/null "http://127.0.0.1:$endpoint_port/" && break
    sleep 0.1
done
post /api/endpoints "{\"url\": \"http://127.0.0.1:$endpoint_port/flare\", \"secret\": \"$endpoint_secret\"}"

# Some events for the read routes: ones the demo jobs run, one whose endpoint job fails (a run to
# retry), and a delayed one (an event to cancel).
post /trigger '{"event": "user.created", "payload": {"userId": "u_1", "email": "ada@example.com", "name": "Ada"}}'
post /trigger '{"event": "file.uploaded", "payload": {"fileId": "f_1", "filename": "a.png"}}'
post /trigger '{"event": "file.uploaded", "payload": {"filename": "no-id.png"}}'
post /trigger '{"event": "reminder.send", "payload": {"userId": "u_1", "message": "hi"}, "delay": "2h"}'
sleep 2

mkdir -p "$report_dir"
status=0
"$venv/bin/schemathesis" --config-file scripts/schemathesis.toml run "$base/api/openapi.json" \
    --checks all --exclude-checks positive_data_acceptance \
    --header "Authorization: Bearer $api_key" \
    --max-examples "$max_examples" \
    --workers 1 \
    --no-color \
    --report junit --report-dir "$report_dir" \
    "$@" || status=$?

if grep -q -i -E 'panicked|internal error' "$work/server.log"; then
    echo "schemathesis.sh: the server logged a panic or an internal error:" >&2
    grep -i -E -A3 'panicked|internal error' "$work/server.log" >&2
    status=1
fi
exit "$status"
