"""The endpoint, framework-free: verifies each request, answers ``index`` with the jobs
(protocol version 2) and ``run`` with what the job reached. The adapters feed it raw bodies."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

from .execute import execute, execute_async
from .job import Job
from .signature import SignatureError, verify

PROTOCOL_VERSION = 2
"""The protocol version this SDK speaks."""

MAX_BODY_BYTES = 4 * 1024 * 1024
"""Largest request body read."""

Response = Tuple[int, bytes]
Headers = Callable[[str], Optional[str]]


def _json(status: int, value: Any) -> Response:
    try:
        return status, json.dumps(value).encode()
    except (TypeError, ValueError) as e:
        return 200, json.dumps({"error": f"the job's output is not JSON: {e}"}).encode()


class Handler:
    """Serves ``jobs``, verifying requests with ``secret`` (``whsec_…``; several while rotating;
    default ``FLARE_ENDPOINT_SECRET``). ``base_url`` is Flare's address as the callers of
    ``step.callback``'s URLs reach it (default ``FLARE_URL``, else ``http://127.0.0.1:3000``)."""

    def __init__(
        self, jobs: Sequence[Job], secret: Union[str, Sequence[str], None] = None, base_url: Optional[str] = None
    ) -> None:
        self.base_url = base_url
        s = secret if secret is not None else os.environ.get("FLARE_ENDPOINT_SECRET")
        self.secrets = [s] if isinstance(s, str) else list(s or [])
        if not self.secrets:
            raise ValueError("no secret: pass secret= or set FLARE_ENDPOINT_SECRET to the endpoint's secret (whsec_…)")
        self.jobs: Dict[str, Job] = {}
        for job in jobs:
            if job.id in self.jobs:
                raise ValueError(f"job id {job.id} is used twice")
            self.jobs[job.id] = job
        self.index = {"protocol": PROTOCOL_VERSION, "jobs": [j.index_entry() for j in jobs]}

    def _read(self, body: bytes, header: Headers) -> Union[Response, Tuple[Job, Mapping[str, Any]]]:
        headers = {h: header(h) for h in ("webhook-id", "webhook-timestamp", "webhook-signature")}
        try:
            verify(self.secrets, headers, body)
        except SignatureError as e:
            return _json(401, {"error": str(e)})
        try:
            request = json.loads(body)
        except ValueError:
            return _json(400, {"error": "the body is not JSON"})
        if not isinstance(request, dict):
            return _json(400, {"error": "the body is not a JSON object"})
        if request.get("action") == "index":
            return _json(200, self.index)
        if request.get("action") != "run":
            return _json(400, {"error": f"unknown action {request.get('action')!r}"})
        job_id = (request.get("job") or {}).get("id")
        job = self.jobs.get(job_id or "")
        if job is None:
            return _json(200, {"error": f"this endpoint serves no job {job_id!r}", "retry": False})
        return job, request

    def handle(self, body: bytes, header: Headers) -> Response:
        """One request (``header`` looks a header up by lowercase name): status and JSON body."""
        read = self._read(body, header)
        if isinstance(read[0], int):
            return read
        job, request = read
        return _json(200, execute(job, request, base_url=self.base_url))

    async def handle_async(self, body: bytes, header: Headers) -> Response:
        """As :meth:`handle`, in the running event loop."""
        read = self._read(body, header)
        if isinstance(read[0], int):
            return read
        job, request = read
        return _json(200, await execute_async(job, request, base_url=self.base_url))
