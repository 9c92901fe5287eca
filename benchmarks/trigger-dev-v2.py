#!/usr/bin/env python3
"""Runs per second of a Trigger.dev v2 job with one io.runTask and one io.logger.info.

Starts `flare serve` (SQLite in a temp dir) and the example project `examples/trigger-dev-v2`
(the real @trigger.dev/sdk 2.3.19 on plain Node http, its test jobs on), registers the endpoint as
the v2 CLI does, sends N `bench.task` events through `POST /api/v1/events/bulk` (100 per request),
and times until /metrics counts N succeeded runs of `bench-task`. Each run is an EXECUTE_JOB call,
a task created and completed, and a log task: four HTTP exchanges and two step writes.

    python3 benchmarks/trigger-dev-v2.py --flare target/release/flare --events 2000 --reps 3

Needs `npm ci --prefix examples/trigger-dev-v2`. Prints one JSON line per repetition.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

KEY = "tr_dev_flareExampleKey1"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "trigger-dev-v2")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(method, url, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as res:
        return res.read().decode()


def wait(what, check, seconds=30):
    deadline = time.time() + seconds
    while True:
        try:
            if check():
                return
        except Exception:
            pass
        if time.time() > deadline:
            sys.exit(f"timed out: {what}")
        time.sleep(0.05)


def succeeded(base, job):
    text = request("GET", f"{base}/metrics")
    pattern = r'flare_runs_finished_total\{([^}]*)\} (\d+)'
    total = {"succeeded": 0, "failed": 0}
    for labels, n in re.findall(pattern, text):
        if f'job="{job}"' in labels:
            for outcome in total:
                if f'outcome="{outcome}"' in labels:
                    total[outcome] += int(n)
    return total


def rep(flare_bin, events):
    with tempfile.TemporaryDirectory() as tmp:
        port, app_port = free_port(), free_port()
        base = f"http://127.0.0.1:{port}"
        env = dict(os.environ, FLARE_DEMO="false", RUST_LOG="error")
        for name in ("FLARE_API_KEY", "FLARE_ENDPOINTS", "DATABASE_URL"):
            env.pop(name, None)
        flare = subprocess.Popen(
            [flare_bin, "serve", "--listen", f"127.0.0.1:{port}",
             "--database-url", f"sqlite://{tmp}/flare.db"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        app = subprocess.Popen(
            ["node", "--import", "tsx", "src/server.ts"],
            cwd=EXAMPLE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=dict(os.environ, FLARE_URL=base, PORT=str(app_port), STATE_DIR=tmp,
                     TRIGGER_API_KEY=KEY))
        try:
            wait("flare serve", lambda: request("GET", f"{base}/healthz"))
            url = f"http://127.0.0.1:{app_port}/api/trigger"
            wait("registration", lambda: request(
                "POST", f"{base}/api/v1/endpoints", {"url": url, "name": "flare-example"},
                {"Authorization": f"Bearer {KEY}"}))
            start = time.time()
            for first in range(0, events, 100):
                batch = [{"name": "bench.task", "payload": {"n": i}}
                         for i in range(first, min(first + 100, events))]
                request("POST", f"{base}/api/v1/events/bulk", {"events": batch},
                        {"Authorization": f"Bearer {KEY}"})
            sent = time.time() - start
            wait("every run", lambda: sum(succeeded(base, "bench-task").values()) >= events,
                 seconds=600)
            elapsed = time.time() - start
            outcome = succeeded(base, "bench-task")
            return {"scenario": "trigger-dev-v2", "events": events,
                    "runs_per_sec": round(events / elapsed, 1),
                    "seconds": round(elapsed, 2), "send_seconds": round(sent, 2), **outcome}
        finally:
            for proc in (app, flare):
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flare", default=os.path.join(ROOT, "target", "release", "flare"))
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    for _ in range(args.reps):
        print(json.dumps(rep(args.flare, args.events)), flush=True)


if __name__ == "__main__":
    main()
