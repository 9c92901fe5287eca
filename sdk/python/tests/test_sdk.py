"""The SDK's own tests (pytest)."""

from __future__ import annotations

import asyncio
import inspect
import io
import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple

import pytest

from flare_sdk import (
    AsyncContext,
    Callback,
    Context,
    SyncContext,
    Flare,
    NonRetriableError,
    StepError,
    define_job,
    execute,
    request_handler,
    serve_asgi,
    serve_wsgi,
    sign,
    to_ms,
    verify,
)
from flare_sdk.signature import SignatureError
from flare_sdk.testing import run_job

SECRET = "whsec_ZmxhcmUtZW5kcG9pbnQtZG9jcy1leGFtcGxlLWtleSE="
calls: Dict[str, int] = {"accounts": 0}


def request(steps: Optional[Dict[str, Any]] = None, job: str = "onboard") -> Dict[str, Any]:
    return {
        "action": "run",
        "protocol": 2,
        "run": {"id": "run_1", "attempt": 1, "maxAttempts": 3},
        "job": {"id": job, "version": "1.0.0"},
        "event": {"id": "evt_1", "name": "user.created", "payload": {"email": "ada@example.com"}},
        "steps": steps or {},
    }


def create(email: str) -> Dict[str, str]:
    calls["accounts"] += 1
    return {"id": "a_1", "email": email}


@define_job("onboard", trigger={"event": "user.created"})
async def onboard(ctx: AsyncContext) -> Dict[str, Any]:
    ctx.logger.info("start")
    account = await ctx.step.run("create-account", lambda: create(ctx.event.payload["email"]))
    plan = await ctx.step.run("pick-plan", lambda: "free")
    await ctx.step.sleep("a-day-later", "1d")
    ctx.logger.info("after the sleep")
    sent = await ctx.step.send_event("notify", {"name": "user.onboarded", "payload": {"id": account["id"]}})
    return {"account": account["id"], "plan": plan, "sent": sent["ids"]}


@define_job("onboard-sync", trigger={"event": "user.created"}, retry={"maxAttempts": 5}, timeout_ms=10_000)
def onboard_sync(ctx: SyncContext) -> Dict[str, Any]:
    account = ctx.step.run("create-account", lambda: create(ctx.event.payload["email"]))
    try:
        ctx.step.sleep("a-day-later", 86_400_000)
    except Exception:  # a job's broad except does not swallow the suspension
        return {"swallowed": True}
    return {"account": account["id"]}


def test_the_worked_example_of_the_docs_verifies() -> None:
    body = b'{"action":"index"}'
    assert sign(SECRET, "msg_2f1c7b9e4a8d0356", 1717171717, body) == "v1,JX3TgSCyryPPV0rp5x/lz2JM5/JeGDsQWGTdZN7nhGM="
    headers = {
        "webhook-id": "msg_2f1c7b9e4a8d0356",
        "webhook-timestamp": "1717171717",
        "webhook-signature": "v0,x v1,JX3TgSCyryPPV0rp5x/lz2JM5/JeGDsQWGTdZN7nhGM=",
    }
    verify(SECRET, headers, body, now=1717171717)
    verify(["whsec_b3RoZXI=", SECRET], headers, body, now=1717171717 + 299)
    with pytest.raises(SignatureError, match="within 5 minutes"):
        verify(SECRET, headers, body, now=1717171717 + 301)
    with pytest.raises(SignatureError, match="no webhook-signature entry matches"):
        verify(SECRET, headers, body + b" ", now=1717171717)
    with pytest.raises(SignatureError, match="missing"):
        verify(SECRET, {**headers, "webhook-id": None}, body, now=1717171717)


def test_a_call_runs_new_steps_until_one_suspends_replaying_stored_ones() -> None:
    calls["accounts"] = 0
    first = execute(onboard, request())
    assert first == {
        "steps": [
            {"key": "create-account", "op": "run", "output": {"id": "a_1", "email": "ada@example.com"}},
            {"key": "pick-plan", "op": "run", "output": "free"},
            {"key": "a-day-later", "op": "sleep", "durationMs": 86_400_000},
        ],
        "logs": [{"level": "info", "message": "start"}],
    }
    stored: Dict[str, Any] = {"create-account": {"output": {"id": "a_1"}}, "pick-plan": {"output": "free"}, "a-day-later": {"output": None}}
    second = execute(onboard, request(stored))
    assert second["steps"] == [{"key": "notify", "op": "sendEvent", "events": [{"name": "user.onboarded", "payload": {"id": "a_1"}}]}]
    assert second["logs"] == [{"level": "info", "message": "after the sleep"}]
    third = execute(onboard, request({**stored, "notify": {"output": {"ids": ["run_1-notify-0"]}}}))
    assert third == {"output": {"account": "a_1", "plan": "free", "sent": ["run_1-notify-0"]}}
    assert calls["accounts"] == 1


def test_plain_def_jobs_and_the_suspension_is_not_swallowed() -> None:
    a = execute(onboard_sync, request(job="onboard-sync"))
    assert a["steps"][-1] == {"key": "a-day-later", "op": "sleep", "durationMs": 86_400_000}
    assert "output" not in a
    b = execute(onboard_sync, request({"create-account": {"output": {"id": "a_1"}}, "a-day-later": {"output": None}}, "onboard-sync"))
    assert b == {"output": {"account": "a_1"}}
    assert onboard_sync.index_entry() == {
        "id": "onboard-sync",
        "name": "onboard-sync",
        "version": "1.0.0",
        "trigger": {"event": "user.created"},
        "retry": {"maxAttempts": 5},
        "timeoutMs": 10_000,
    }


def test_failed_steps_non_retriable_errors_and_changed_code() -> None:
    tries = {"n": 0}

    def ship() -> str:
        tries["n"] += 1
        if tries["n"] == 1:
            raise RuntimeError("carrier down")
        return "ok"

    @define_job("flaky", trigger={"event": "a.b"})
    def flaky(ctx: Context) -> Any:
        ctx.step.run("one", lambda: 1)
        return ctx.step.run("two", ship)

    assert execute(flaky, request(job="flaky")) == {
        "steps": [{"key": "one", "op": "run", "output": 1}, {"key": "two", "op": "run", "error": "carrier down"}],
        "error": "carrier down",
    }
    again = execute(flaky, request({"one": {"output": 1}, "two": {"error": "carrier down"}}, "flaky"))
    assert again == {"steps": [{"key": "two", "op": "run", "output": "ok"}], "output": "ok"}

    @define_job("fatal", trigger={"event": "a.b"})
    def fatal(ctx: Context) -> None:
        raise NonRetriableError("no such user")

    assert execute(fatal, request(job="fatal")) == {"error": "no such user", "retry": False}

    @define_job("changed", trigger={"event": "a.b"})
    def changed(ctx: Context) -> int:
        ctx.step.run("renamed", lambda: 1)
        return 1

    a = execute(changed, request({"original": {"output": 1}}, "changed"))
    assert a["retry"] is False and "'original' is stored but was not reached" in a["error"]

    @define_job("twice", trigger={"event": "a.b"})
    def twice(ctx: Context) -> None:
        ctx.step.run("a", lambda: 1)
        ctx.step.run("a", lambda: 2)

    b = execute(twice, request(job="twice"))
    assert b["retry"] is False and "used twice" in b["error"]


def test_a_full_answer_ends_before_the_next_new_step() -> None:
    @define_job("many", trigger={"event": "a.b"})
    def many(ctx: SyncContext) -> int:
        total = 0
        for i in range(150):
            total += ctx.step.run(f"s{i}", lambda: i)
        return total

    first = execute(many, request(job="many"))
    assert len(first["steps"]) == 100 and "output" not in first
    assert run_job(many).output == 11175

    @define_job("big", trigger={"event": "a.b"})
    def big(ctx: SyncContext) -> str:
        for i in range(3):
            ctx.step.run(f"b{i}", lambda: "x" * 300 * 1024)
        return "done"

    assert len(execute(big, request(job="big"))["steps"]) == 2


def test_run_job_runs_a_job_to_its_end_with_mocked_steps() -> None:
    calls["accounts"] = 0
    r = run_job(onboard, {"email": "b@example.com"}, steps={"create-account": {"id": "a_mock"}})
    assert calls["accounts"] == 0
    assert r.output == {"account": "a_mock", "plan": "free", "sent": ["run_test-notify-0"]}
    assert r.sleeps == [{"key": "a-day-later", "durationMs": 86_400_000}]
    assert r.events == [{"name": "user.onboarded", "payload": {"id": "a_mock"}}]
    assert [s["key"] for s in r.steps] == ["pick-plan", "a-day-later", "notify"]
    assert [line["message"] for line in r.logs] == ["start", "after the sleep"]


@define_job("pay", trigger={"event": "invoice.created"})
async def pay(ctx: AsyncContext) -> Dict[str, Any]:
    await ctx.step.run("create", lambda: "inv")
    paid = await ctx.step.wait_for_event(
        "paid", event="invoice.paid", match="payload.invoiceId", if_="async.payload.amount >= 10", timeout="3d"
    )
    other = await ctx.step.wait_for_event("other", event="invoice.sent", timeout=1000)
    return {"paid": paid["payload"] if paid is not None else None, "other": other}


@define_job("pay-sync", trigger={"event": "invoice.created"})
def pay_sync(ctx: SyncContext) -> Optional[str]:
    paid = ctx.step.wait_for_event("paid", event="invoice.paid", timeout=60_000)
    return None if paid is None else paid["id"]


PAID = {"id": "evt_9", "name": "invoice.paid", "payload": {"invoiceId": "in_1", "amount": 12}, "timestamp": "2030-01-01T00:00:00Z"}


def test_wait_for_event_suspends_with_the_wait_then_returns_the_stored_event_or_none() -> None:
    a = execute(pay, request(job="pay"))
    assert a == {
        "steps": [
            {"key": "create", "op": "run", "output": "inv"},
            {
                "key": "paid",
                "op": "waitForEvent",
                "event": "invoice.paid",
                "timeoutMs": 259_200_000,
                "match": "payload.invoiceId",
                "if": "async.payload.amount >= 10",
            },
        ]
    }
    b = execute(pay, request({"create": {"output": "inv"}, "paid": {"output": PAID}}, "pay"))
    assert b == {"steps": [{"key": "other", "op": "waitForEvent", "event": "invoice.sent", "timeoutMs": 1000}]}
    c = execute(pay, request({"create": {"output": "inv"}, "paid": {"output": PAID}, "other": {"output": None}}, "pay"))
    assert c == {"output": {"paid": {"invoiceId": "in_1", "amount": 12}, "other": None}}
    assert execute(pay_sync, request(job="pay-sync"))["steps"][0]["op"] == "waitForEvent"
    assert execute(pay_sync, request({"paid": {"output": PAID}}, "pay-sync")) == {"output": "evt_9"}

    # run_job: a wait not mocked times out; a mocked one resumes with its event.
    timed_out = run_job(pay, {})
    assert timed_out.output == {"paid": None, "other": None}
    assert [w["key"] for w in timed_out.waits] == ["paid", "other"]
    resumed = run_job(pay, {}, steps={"paid": PAID})
    assert resumed.output == {"paid": {"invoiceId": "in_1", "amount": 12}, "other": None}


@define_job("double", trigger={"event": "never.sent"})
def double(ctx: SyncContext) -> Dict[str, int]:
    return {"n": ctx.event.payload["n"] * 2}


@define_job("boom", trigger={"event": "never.sent"})
async def boom(ctx: AsyncContext) -> None:
    raise NonRetriableError("boom went the child")


@define_job("parent", trigger={"event": "parent.start"})
async def parent(ctx: AsyncContext) -> Dict[str, Any]:
    await ctx.step.run("before", lambda: 1)
    try:
        got = await ctx.step.invoke("call", job=boom if ctx.event.payload.get("job") == "boom" else "double", payload={"n": 21}, timeout="1h")
    except StepError as e:
        return {"failed": str(e), "key": e.key}
    return {"got": got}


@define_job("parent-sync", trigger={"event": "parent.start"})
def parent_sync(ctx: SyncContext) -> Any:
    return ctx.step.invoke("call", job=double, payload={"n": 1}, timeout=1000)


def test_invoke_suspends_with_the_child_then_returns_its_output_or_raises_a_step_error() -> None:
    assert execute(parent, request(job="parent")) == {
        "steps": [
            {"key": "before", "op": "run", "output": 1},
            {"key": "call", "op": "invoke", "job": "double", "payload": {"n": 21}, "timeoutMs": 3_600_000},
        ]
    }
    assert execute(parent, request({"before": {"output": 1}, "call": {"output": {"n": 42}}}, "parent")) == {"output": {"got": {"n": 42}}}
    failed = execute(parent, request({"before": {"output": 1}, "call": {"error": "invoke 'call': run run_2 failed: boom"}}, "parent"))
    assert failed == {"output": {"failed": "invoke 'call': run run_2 failed: boom", "key": "call"}}
    # Not caught, the step error fails the attempt (retried by the job's policy).
    assert execute(parent_sync, request({"call": {"error": "the child failed"}}, "parent-sync")) == {"error": "the child failed"}
    assert execute(parent_sync, request(job="parent-sync"))["steps"] == [
        {"key": "call", "op": "invoke", "job": "double", "payload": {"n": 1}, "timeoutMs": 1000}
    ]

    # run_job: a job given in jobs= runs; a mocked step returns its result; fail_steps raises.
    ran = run_job(parent, {}, jobs=[double])
    assert ran.output == {"got": {"n": 42}}
    assert ran.invokes == [{"key": "call", "job": "double", "payload": {"n": 21}, "timeoutMs": 3_600_000}]
    failing = run_job(parent, {"job": "boom"}, jobs=[double, boom])
    assert "boom went the child" in failing.output["failed"]
    assert run_job(parent, {}, steps={"call": {"n": 1}}).output == {"got": {"n": 1}}
    assert run_job(parent, {}, fail_steps={"call": "timed out"}).output == {"failed": "timed out", "key": "call"}
    assert "neither mocked nor given" in run_job(parent, {}).output["failed"]
    down = run_job(parent, {}, fail_steps={"before": "down"}, jobs=[double])
    assert down.error == "down" and down.steps == [{"key": "before", "op": "run", "error": "down"}]


@define_job("approve", trigger={"event": "approval.asked"})
async def approve(ctx: AsyncContext) -> Dict[str, Any]:
    cb: Callback = await ctx.step.callback("ask", timeout="1d")
    ctx.logger.info("made", url=cb.url)
    mailed = await ctx.step.run("mail", lambda: cb.url)
    answer = await ctx.step.wait_for_callback(cb)
    return {"answer": answer, "mailed": mailed, "deadline": cb.deadline}


@define_job("approve-sync", trigger={"event": "approval.asked"})
def approve_sync(ctx: SyncContext) -> Any:
    cb = ctx.step.callback("ask", timeout=1000)
    return ctx.step.wait_for_callback(cb)


def test_a_callback_is_made_told_with_its_url_then_waited_for() -> None:
    assert execute(approve, request(job="approve")) == {"steps": [{"key": "ask", "op": "callback", "timeoutMs": 86_400_000}]}
    callback = {"token": "cb_1", "path": "/callbacks/cb_1", "deadline": "2030-01-02T00:00:00.000Z"}
    b = execute(approve, request({"ask": {"callback": callback}}, "approve"), base_url="https://flare.example.com/")
    assert b == {
        "steps": [
            {"key": "mail", "op": "run", "output": "https://flare.example.com/callbacks/cb_1"},
            {"key": "ask", "op": "waitForCallback"},
        ],
        "logs": [{"level": "info", "message": "made", "fields": {"url": "https://flare.example.com/callbacks/cb_1"}}],
    }
    stored = {"ask": {"callback": callback, "output": {"approved": True}}, "mail": {"output": "u"}}
    assert execute(approve, request(stored, "approve")) == {
        "output": {"answer": {"approved": True}, "mailed": "u", "deadline": "2030-01-02T00:00:00.000Z"}
    }
    late = {"ask": {"callback": {"deadline": callback["deadline"]}, "output": None}, "mail": {"output": "u"}}
    assert execute(approve, request(late, "approve"))["output"]["answer"] is None
    assert execute(approve_sync, request({"ask": {"callback": callback}}, "approve-sync")) == {
        "steps": [{"key": "ask", "op": "waitForCallback"}]
    }

    @define_job("stray", trigger={"event": "a.b"})
    def stray(ctx: SyncContext) -> Any:
        return ctx.step.wait_for_callback(Callback(key="nowhere", token="", path="", url="", deadline=""))

    d = execute(stray, request(job="stray"))
    assert d["retry"] is False and "wait for what step.callback returned" in d["error"]

    # run_job: an unmocked callback times out; a mocked one resumes with its body.
    timed_out = run_job(approve, {}, base_url="http://flare.test")
    assert timed_out.output["answer"] is None
    assert timed_out.output["mailed"] == "http://flare.test/callbacks/cb_test_ask"
    assert timed_out.callbacks == [{"key": "ask", "url": "http://flare.test/callbacks/cb_test_ask", "timeoutMs": 86_400_000}]
    answered = run_job(approve, {}, steps={"ask": {"approved": True}}, base_url="http://flare.test")
    assert answered.output["answer"] == {"approved": True}
    assert answered.output["mailed"] == "http://flare.test/callbacks/cb_test_ask"


def test_flow_control_settings_go_to_the_index() -> None:
    @define_job(
        "limited",
        trigger={"event": "a.b"},
        concurrency=[{"limit": 1, "key": "event.payload.customerId"}, {"limit": 10, "group": "openai"}],
        throttle={"limit": 10, "periodMs": 60_000, "burst": 2},
        rate_limit={"limit": 1, "periodMs": 3_600_000, "key": "event.payload.userId"},
        start_timeout_ms=60_000,
    )
    def limited(ctx: Context) -> None:
        return None

    assert limited.index_entry() == {
        "id": "limited",
        "name": "limited",
        "version": "1.0.0",
        "trigger": {"event": "a.b"},
        "concurrency": [{"limit": 1, "key": "event.payload.customerId"}, {"limit": 10, "group": "openai"}],
        "throttle": {"limit": 10, "periodMs": 60_000, "burst": 2},
        "rateLimit": {"limit": 1, "periodMs": 3_600_000, "key": "event.payload.userId"},
        "startTimeoutMs": 60_000,
    }


def test_debounce_priority_and_cancel_on_reach_the_index() -> None:
    @define_job(
        "edits",
        trigger={"event": "doc.edited"},
        debounce={"periodMs": 5_000, "key": "event.payload.docId", "timeoutMs": 60_000},
        priority={"run": "event.payload.plan == 'enterprise' ? 120 : 0"},
        cancel_on=[{"event": "doc.deleted", "match": "payload.docId"}],
    )
    def edits(ctx: Context) -> None:
        return None

    entry = edits.index_entry()
    assert entry["debounce"] == {"periodMs": 5_000, "key": "event.payload.docId", "timeoutMs": 60_000}
    assert entry["priority"] == {"run": "event.payload.plan == 'enterprise' ? 120 : 0"}
    assert entry["cancelOn"] == [{"event": "doc.deleted", "match": "payload.docId"}]


def signed(body: bytes, secret: str = SECRET) -> Dict[str, str]:
    ts = str(int(time.time()))
    return {"webhook-id": "msg_t", "webhook-timestamp": ts, "webhook-signature": sign(secret, "msg_t", ts, body)}


INDEX = {"protocol": 2, "jobs": [onboard.index_entry(), onboard_sync.index_entry()]}


def test_the_standard_library_server_answers_index_and_run_and_refuses_unsigned() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), request_handler([onboard, onboard_sync], SECRET))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/flare"

    def post(body: bytes, headers: Dict[str, str], path: str = "/flare") -> Tuple[int, Any]:
        req = urllib.request.Request(url.replace("/flare", path), data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req) as res:
                return res.status, json.loads(res.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    try:
        assert post(b'{"action":"index"}', signed(b'{"action":"index"}')) == (200, INDEX)
        body = json.dumps(request(job="nope")).encode()
        assert post(body, signed(body)) == (200, {"error": "this endpoint serves no job 'nope'", "retry": False})
        assert post(b"{}", {})[0] == 401
        assert post(b"{}", {}, "/elsewhere")[0] == 404
        assert post(b'{"action":"index"}', signed(b'{"action":"index"}', "whsec_b3RoZXI="))[0] == 401
    finally:
        server.shutdown()


def test_asgi_and_wsgi_apps() -> None:
    body = json.dumps(request()).encode()
    headers = signed(body)
    app = serve_asgi([onboard], SECRET)
    sent: List[Dict[str, Any]] = []

    async def receive() -> Dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "headers": [(k.encode(), v.encode()) for k, v in headers.items()]}
    asyncio.run(app(scope, receive, send))  # type: ignore[arg-type]
    assert sent[0]["status"] == 200
    # An object, not a function: Starlette's routes call a function with a Request instead.
    assert not inspect.isfunction(app) and not inspect.ismethod(app)
    assert len(json.loads(sent[1]["body"])["steps"]) == 3

    wsgi = serve_wsgi([onboard_sync], SECRET)
    body = json.dumps(request(job="onboard-sync")).encode()
    environ: Dict[str, Any] = {"REQUEST_METHOD": "POST", "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body)}
    environ.update({"HTTP_" + k.upper().replace("-", "_"): v for k, v in signed(body).items()})
    status: List[str] = []
    out = b"".join(wsgi(environ, lambda s, h: status.append(s)))
    assert status == ["200 OK"]
    assert json.loads(out)["steps"][0]["key"] == "create-account"
    environ["REQUEST_METHOD"] = "GET"
    wsgi(environ, lambda s, h: status.append(s))
    assert status[-1].startswith("405")


def test_the_client_sends_events_with_an_id_a_delay_and_deliver_at() -> None:
    seen: List[Dict[str, Any]] = []

    class Capture(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers["content-length"]))
            seen.append({"auth": self.headers.get("authorization"), "path": self.path, "body": json.loads(body)})
            out = json.dumps({"success": True, "result": {"id": "evt_9", "name": "a.b", "runIds": []}}).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Capture)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        flare = Flare(f"http://127.0.0.1:{server.server_address[1]}/", api_key="k")
        assert flare.send("a.b", {"n": 1}, id="order-1", delay="1h30m")["id"] == "evt_9"
        flare.send("a.b", deliver_at="2030-01-01T09:00:00Z")
        assert seen[0] == {"auth": "Bearer k", "path": "/trigger", "body": {"event": "a.b", "payload": {"n": 1}, "delay": "1h30m", "id": "order-1"}}
        assert seen[1]["body"] == {"event": "a.b", "payload": None, "deliverAt": "2030-01-01T09:00:00Z"}
    finally:
        server.shutdown()


def test_durations() -> None:
    assert to_ms(1500) == 1500
    assert to_ms("1h30m") == 5_400_000
    assert to_ms("250ms") == 250
    with pytest.raises(ValueError, match="invalid duration"):
        to_ms("soon")
