#!/usr/bin/env python3
"""A Flare job endpoint in Python, standard library only.

Flare POSTs signed JSON to one URL, and this server answers which jobs it has (``index``) and
runs them (``run``). The protocol is in docs/endpoints.md; run it with

    FLARE_ENDPOINT_SECRET=whsec_... python3 server.py
"""

import base64
import hashlib
import hmac
import json
import os
import re
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(os.environ.get("PORT", "4001"))
HOST = os.environ.get("HOST", "127.0.0.1")
PATH = "/flare"
TOLERANCE_SECS = 300  # requests signed further than this from our clock are refused
MAX_BODY_BYTES = 4 * 1024 * 1024  # Flare's payloads are at most FLARE_MAX_BODY_BYTES (1 MiB by default)


# ---- Jobs -------------------------------------------------------------------------------------


class Fatal(Exception):
    """Raised by a job to fail its run at once: retrying the same payload cannot help."""


class Context:
    """What a job gets besides its payload: the run, the event, a log and a way to send events."""

    def __init__(self, run, event):
        self.run = run
        self.event = event
        self.logs = []
        self.events = []

    def log(self, level, message, **fields):
        """Adds a log line (level: debug, info, warn or error) to the run in Flare."""
        line = {"level": level, "message": message}
        if fields:
            line["fields"] = fields
        self.logs.append(line)

    def send(self, name, payload, *, key=None, delay=None, deliver_at=None, context=None):
        """Has Flare send event ``name`` when this run succeeds.

        ``key`` makes the event's id ``<run id>-<key>``, so a retried run does not send it twice.
        ``delay`` is "1h30m" or {"hours": 1}; ``deliver_at`` an RFC 3339 time.
        """
        event = {"name": name, "payload": payload}
        optional = {"key": key, "delay": delay, "deliverAt": deliver_at, "context": context}
        event.update((k, v) for k, v in optional.items() if v is not None)
        self.events.append(event)


JOBS = {}


def job(id, name, version, event, *, payload_filter=None, retry=None, timeout_ms=None, concurrency=None):
    """Registers the decorated function ``f(payload, ctx)`` as a job; its return value is the output."""

    def register(run):
        definition = {"id": id, "name": name, "version": version, "trigger": {"event": event}}
        if payload_filter is not None:
            definition["trigger"]["filter"] = payload_filter
        optional = {"retry": retry, "timeoutMs": timeout_ms, "concurrency": concurrency}
        definition.update((k, v) for k, v in optional.items() if v is not None)
        JOBS[id] = (definition, run)
        return run

    return register


@job(
    "invoice-create",
    "Create an invoice for an order",
    "1.0.0",
    "order.placed",
    payload_filter={"currency": ["usd", "eur"]},
    retry={"maxAttempts": 5, "minDelayMs": 2000},
    timeout_ms=60_000,
)
def invoice_create(order, ctx):
    try:
        order_id, email, currency = order["orderId"], order["email"], order["currency"]
        total = sum(item["quantity"] * item["unitPriceCents"] for item in order["items"])
    except (KeyError, TypeError) as error:
        raise Fatal(f"invalid order ({error}): needs orderId, email, currency and items") from None
    invoice = {"invoiceId": f"inv_{order_id}", "totalCents": total, "currency": currency}
    ctx.log("info", f"invoice {invoice['invoiceId']} for order {order_id}", totalCents=total)
    ctx.send("invoice.created", {**invoice, "email": email}, key="invoice")
    return invoice


@job("invoice-email", "Email the invoice", "1.0.0", "invoice.created", concurrency=5)
def invoice_email(invoice, ctx):
    ctx.log("info", f"emailing {invoice['invoiceId']} to {invoice['email']}")
    return {"sent": True, "to": invoice["email"]}


# ---- The protocol -----------------------------------------------------------------------------


def index():
    """The ``index`` answer: every job's definition."""
    return {"jobs": [definition for definition, _ in JOBS.values()]}


def run_job(request):
    """The ``run`` answer: {output, logs, events}, or {error, logs} (with retry: False for Fatal)."""
    job_id = request["job"]["id"]
    if job_id not in JOBS:
        return {"error": f"this endpoint has no job {job_id!r}", "retry": False}
    _, run = JOBS[job_id]
    event = request["event"]
    ctx = Context(request["run"], event)
    try:
        output = run(event.get("payload"), ctx)
    except Fatal as fatal:
        return {"error": str(fatal), "retry": False, "logs": ctx.logs}
    except Exception as error:  # anything else fails this attempt; Flare retries it
        return {"error": f"{type(error).__name__}: {error}", "logs": ctx.logs}
    return {"output": output, "logs": ctx.logs, "events": ctx.events}


def verify(headers, body, key, now=None):
    """Checks the Standard Webhooks signature Flare puts on every request.

    HMAC-SHA256 with the endpoint's secret over ``{webhook-id}.{webhook-timestamp}.{raw body}``,
    in base64. Returns why the request is refused, or None when Flare signed it.
    """
    msg_id = headers.get("webhook-id")
    timestamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if not (msg_id and timestamp and signatures):
        return "missing webhook-id, webhook-timestamp or webhook-signature"
    now = int(time.time()) if now is None else now
    if not re.fullmatch(r"[0-9]+", timestamp) or abs(now - int(timestamp)) > TOLERANCE_SECS:
        return "webhook-timestamp is not within 5 minutes of now"
    signed = f"{msg_id}.{timestamp}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest())
    # Several space-separated "v1,<base64>" entries while the secret is rotated: any may match.
    for entry in signatures.split(" "):
        version, _, signature = entry.partition(",")
        if version == "v1" and hmac.compare_digest(signature.encode(), expected):
            return None
    return "no webhook-signature entry matches"


# ---- HTTP -------------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    key = b""  # set in main()

    def do_POST(self):
        if self.path.split("?", 1)[0] != PATH:
            return self.answer(404, {"error": f"not found: Flare calls POST {PATH}"})
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY_BYTES:
            return self.answer(413, {"error": "request body too large"})
        body = self.rfile.read(length)
        refused = verify(self.headers, body, self.key)
        if refused:
            return self.answer(401, {"error": refused})
        try:
            request = json.loads(body)
        except ValueError:
            return self.answer(400, {"error": "the body is not JSON"})
        action = request.get("action") if isinstance(request, dict) else None
        if action == "index":
            return self.answer(200, index())
        if action == "run":
            if not isinstance(request.get("job"), dict) or not isinstance(request.get("event"), dict):
                return self.answer(400, {"error": "a run request needs job.id and event"})
            return self.answer(200, run_job(request))
        return self.answer(400, {"error": f"unknown action {action!r}"})

    def do_GET(self):
        self.answer(405, {"error": f"use POST {PATH}"})

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main():
    secret = os.environ.get("FLARE_ENDPOINT_SECRET", "")
    try:
        Handler.key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except ValueError:
        Handler.key = b""
    if not Handler.key:
        sys.exit("set FLARE_ENDPOINT_SECRET to the endpoint's secret (whsec_<base64>)")
    server = ThreadingHTTPServer((HOST, PORT), Handler)
    print(f"Flare endpoint on http://{HOST}:{PORT}{PATH} with jobs {', '.join(JOBS)}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
