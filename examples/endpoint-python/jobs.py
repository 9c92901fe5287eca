"""Two Flare jobs with durable steps, written with the Python SDK (``flare_sdk``); ``app.py``
serves them with FastAPI."""

from typing import Any, Dict

from flare_sdk import Context, NonRetriableError, define_job


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
