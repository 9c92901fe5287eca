"""A three-step job through the Python SDK (sdk/python), for
`flare bench endpoint --endpoint-cmd "python3 benchmarks/endpoint-sdk-3steps.py"`: the benchmark
job `bench-noop` on `bench.noop` with three `step.run` steps (a plain `def` job on the standard
library's threading server). Prints `listening HOST:PORT`."""

import os
import sys
import time
from http.server import ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk", "python", "src"))

from flare_sdk import Context, define_job, request_handler  # noqa: E402


@define_job("bench-noop", name="Benchmark three steps", trigger={"event": "bench.noop"})
def bench(ctx: Context) -> dict:
    a = ctx.step.run("one", lambda: 1)
    b = ctx.step.run("two", lambda: a + 1)
    c = ctx.step.run("three", lambda: b + 1)
    sent = (ctx.event.payload or {}).get("sentAtUs")
    return {"latencyUs": int(time.time() * 1_000_000) - sent, "steps": c} if sent else {"steps": c}


server = ThreadingHTTPServer(("127.0.0.1", 0), request_handler([bench], path=None))
print("listening %s:%d" % server.server_address, flush=True)
server.serve_forever()
