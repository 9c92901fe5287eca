"""Flare's request signature (Standard Webhooks; docs/endpoints.md, "Verifying the signature"):
HMAC-SHA256 with the base64-decoded secret (after ``whsec_``) over ``{id}.{timestamp}.{body}``."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from typing import Mapping, Optional, Sequence, Union

TOLERANCE_SECONDS = 300
"""How far ``webhook-timestamp`` may be from now."""


class SignatureError(Exception):
    """Why a request was refused."""


def _key(secret: str) -> bytes:
    key = base64.b64decode(secret[len("whsec_") :] if secret.startswith("whsec_") else secret)
    if not key:
        raise SignatureError("the secret is empty")
    return key


def sign(secret: str, msg_id: str, timestamp: Union[int, str], body: bytes) -> str:
    """The ``v1,<base64>`` signature of ``body`` sent as ``msg_id`` at ``timestamp``."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(_key(secret), signed, hashlib.sha256).digest()).decode()


def verify(
    secrets: Union[str, Sequence[str]],
    headers: Mapping[str, Optional[str]],
    body: bytes,
    now: Optional[int] = None,
) -> None:
    """Checks a request from Flare (``headers`` by lowercase name, ``body`` the raw bytes);
    raises :class:`SignatureError` saying why it is refused."""
    msg_id, ts, sig = (headers.get(h) for h in ("webhook-id", "webhook-timestamp", "webhook-signature"))
    if not msg_id or not ts or not sig:
        raise SignatureError("missing webhook-id, webhook-timestamp or webhook-signature")
    now = int(time.time()) if now is None else now
    if not ts.isdigit() or abs(now - int(ts)) > TOLERANCE_SECONDS:
        raise SignatureError("webhook-timestamp is not within 5 minutes of now")
    offered = [e for e in sig.split(" ") if e.startswith("v1,")]
    for secret in [secrets] if isinstance(secrets, str) else secrets:
        expected = sign(secret, msg_id, ts, body)
        if any(hmac.compare_digest(o, expected) for o in offered):
            return
    raise SignatureError("no webhook-signature entry matches")
