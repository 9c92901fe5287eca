"""A job of the Python SDK, run under a real `flare serve` by tests/sdk_e2e.rs: a step, a sleep
(across a Flare restart), a wait for a matching event, a child job invoked (its output used), a
callback resumed by a POST to its URL, a step that fails on the first attempt (a retry), an
event."""

import os
import sys
from typing import Any, Dict

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "sdk", "python", "src"))

from flare_sdk import Context, SyncContext, define_job, serve_http  # noqa: E402

first_runs = 0


@define_job("e2e-py-child", name="SDK end to end, the child (Python)", trigger={"event": "e2e.never"})
def child(ctx: SyncContext) -> Dict[str, int]:
    return {"doubled": ctx.step.run("double", lambda: ctx.event.payload["n"] * 2)}


def first(n: int) -> Dict[str, int]:
    global first_runs
    first_runs += 1
    return {"n": n}


@define_job("e2e-py", name="SDK end to end (Python)", trigger={"event": "e2e.py"}, retry={"maxAttempts": 3, "minDelayMs": 100, "maxDelayMs": 200})
async def job(ctx: Context) -> Dict[str, Any]:
    got = await ctx.step.run("first", lambda: first(ctx.event.payload["n"]))
    await ctx.step.sleep("nap", ctx.event.payload["sleepMs"])
    ctx.logger.info("woke up")
    paid = await ctx.step.wait_for_event("paid", event="e2e.paid", match="payload.n", timeout="1h")
    invoked = await ctx.step.invoke("child", job=child, payload={"n": got["n"]}, timeout="1h")
    approval = await ctx.step.callback("approval", timeout="1h")
    await ctx.step.run("ask", lambda: approval.url)  # the URL a person or a system would be given
    approved = await ctx.step.wait_for_callback(approval)

    def flaky() -> str:
        if ctx.run.attempt == 1:
            raise RuntimeError("flaky failure on attempt 1")
        return f"ok on attempt {ctx.run.attempt}"

    result = await ctx.step.run("flaky", flaky)
    sent = await ctx.step.send_event("notify", {"name": "e2e.done", "payload": {"n": got["n"]}})
    return {
        "first": got,
        "flaky": result,
        "sent": sent["ids"],
        "firstRuns": first_runs,
        "paid": paid and {"id": paid["id"], "payload": paid["payload"]},
        "doubled": invoked["doubled"],
        "approved": approved,
    }


print("listening on", os.environ.get("PORT", "4000"), flush=True)
serve_http([job, child], port=int(os.environ.get("PORT", "4000")))
