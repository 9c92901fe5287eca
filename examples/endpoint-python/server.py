#!/usr/bin/env python3
"""A Flare job endpoint in Python, on the Python SDK (sdk/python, standard library only).

Two jobs with durable steps, served with the standard library's http.server (``fastapi_app.py``
serves the same jobs with FastAPI). Run it with

    FLARE_ENDPOINT_SECRET=whsec_... python3 server.py
"""

import os
import sys
from typing import Any, Dict

# The SDK from this repository; after `pip install ./sdk/python` this line is not needed.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python", "src"))

from flare_sdk import Context, NonRetriableError, define_job, serve_http  # noqa: E402


@define_job(
    "invoice-create",
    name="Create an invoice for an order",
    trigger={"event": "order.placed", "filter": {"currency": ["usd", "eur"]}},
    retry={"maxAttempts": 5, "minDelayMs": 2000},
    timeout_ms=60_000,
)
def invoice_create(ctx: Context) -> Dict[str, Any]:
    order = ctx.event.payload
    try:
        order_id, email, currency = order["orderId"], order["email"], order["currency"]
        total = sum(item["quantity"] * item["unitPriceCents"] for item in order["items"])
    except (KeyError, TypeError) as error:
        raise NonRetriableError(f"invalid order ({error}): needs orderId, email, currency and items") from None
    # A durable step: stored by Flare, not run again when the run is called again or retried.
    invoice = ctx.step.run("create", lambda: {"invoiceId": f"inv_{order_id}", "totalCents": total, "currency": currency})
    ctx.logger.info(f"invoice {invoice['invoiceId']} for order {order_id}", totalCents=total)
    # Sent once, with the id <run id>-invoice-0, however often the run is called.
    ctx.step.send_event("invoice", {"name": "invoice.created", "payload": {**invoice, "email": email}})
    return dict(invoice)


@define_job("invoice-email", name="Email the invoice", trigger={"event": "invoice.created"}, concurrency=5)
def invoice_email(ctx: Context) -> Dict[str, Any]:
    invoice = ctx.event.payload
    ctx.logger.info(f"emailing {invoice['invoiceId']} to {invoice['email']}")
    return {"sent": True, "to": invoice["email"]}


JOBS = [invoice_create, invoice_email]

if __name__ == "__main__":
    port, host = int(os.environ.get("PORT", "4001")), os.environ.get("HOST", "127.0.0.1")
    print(f"Flare endpoint on http://{host}:{port}/flare with jobs {', '.join(j.id for j in JOBS)}", flush=True)
    serve_http(JOBS, port=port, host=host)
