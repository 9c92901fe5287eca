"""Sending events to Flare (``POST /trigger``), with the standard library's ``urllib``."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any, Dict, Optional, Union

from .duration import Duration
from .execute import event_body


class FlareError(Exception):
    """Flare refused the request or could not be reached."""


class Flare:
    """A Flare client. ``base_url`` defaults to ``FLARE_URL`` (else ``http://127.0.0.1:3000``),
    ``api_key`` to ``FLARE_API_KEY``."""

    def __init__(self, base_url: Optional[str] = None, api_key: Optional[str] = None, timeout: float = 30.0) -> None:
        self.base_url = (base_url or os.environ.get("FLARE_URL") or "http://127.0.0.1:3000").rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("FLARE_API_KEY")
        self.timeout = timeout

    def send(
        self,
        name: str,
        payload: Any = None,
        *,
        id: Optional[str] = None,
        delay: Optional[Duration] = None,
        deliver_at: Optional[Union[datetime, str]] = None,
        context: Any = None,
    ) -> Dict[str, Any]:
        """Sends the event ``name``; returns the stored event (with ``runIds``) once it and its
        runs are stored. ``id`` makes it idempotent; ``delay`` / ``deliver_at`` deliver it later."""
        e = event_body({"name": name, "payload": payload, "delay": delay, "deliverAt": deliver_at, "context": context})
        body: Dict[str, Any] = {"event": e["name"], "payload": e["payload"]}
        for k in ("delay", "deliverAt", "context"):
            if k in e:
                body[k] = e[k]
        if id is not None:
            body["id"] = id
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(f"{self.base_url}/trigger", data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as res:
                answer = json.loads(res.read())
        except urllib.error.HTTPError as err:
            why = ""
            try:
                error = json.loads(err.read()).get("error")
                why = error if isinstance(error, str) else (error or {}).get("message", "")
            except ValueError:
                pass
            raise FlareError(f"Flare answered HTTP {err.code}{': ' + why if why else ''}") from None
        except urllib.error.URLError as err:
            raise FlareError(f"could not reach Flare at {self.base_url}: {err.reason}") from None
        result: Dict[str, Any] = answer["result"]
        return result
