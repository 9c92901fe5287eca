"""Testing a job without Flare: :func:`run_job` runs it as Flare would (called again after each
step, sleeps over at once, waits for events and callbacks timed out unless mocked, events
recorded, not sent, invoked jobs run when given), with chosen step results (mocks) and failures."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .execute import execute, flare_url
from .job import Job


@dataclass
class RunJobResult:
    """What the run did."""

    output: Any = None
    error: Optional[str] = None
    retry: Optional[bool] = None
    steps: List[Dict[str, Any]] = field(default_factory=list)
    """The steps it ran (mocked ones not included), in order."""
    results: Dict[str, Any] = field(default_factory=dict)
    """Every step's result by key, mocked ones included."""
    events: List[Dict[str, Any]] = field(default_factory=list)
    sleeps: List[Dict[str, Any]] = field(default_factory=list)
    waits: List[Dict[str, Any]] = field(default_factory=list)
    """The waits for events it reached (not mocked ones): each times out at once (``None``);
    give its key in ``steps`` to resume it with an event instead."""
    invokes: List[Dict[str, Any]] = field(default_factory=list)
    """The jobs it invoked (not mocked ones): ``{"key", "job", "payload", "timeoutMs"}``. A job
    given in ``jobs`` runs (its output, or its error as a ``StepError``); any other fails the
    step: mock its result in ``steps``."""
    callbacks: List[Dict[str, Any]] = field(default_factory=list)
    """The callbacks it made (not mocked ones): ``{"key", "url", "timeoutMs"}`` (token
    ``cb_test_<key>``). A wait for one times out at once (``None``); give its key in ``steps`` to
    resume it with a body instead."""
    logs: List[Dict[str, Any]] = field(default_factory=list)


def _callback(key: str, deadline: str) -> Dict[str, str]:
    token = f"cb_test_{key}"
    return {"token": token, "path": f"/callbacks/{token}", "deadline": deadline}


def run_job(
    job: Job,
    payload: Any = None,
    *,
    event_name: str = "test",
    steps: Optional[Mapping[str, Any]] = None,
    fail_steps: Optional[Mapping[str, str]] = None,
    jobs: Sequence[Job] = (),
    base_url: Optional[str] = None,
    attempt: int = 1,
    max_attempts: int = 3,
) -> RunJobResult:
    """Runs ``job`` to its end for an event with ``payload``. ``steps`` maps step keys to the
    results they return without running (mocks: an invoked job's output, a callback's body, a
    waited event); ``fail_steps`` maps keys to errors they fail with (a ``run`` step's function is
    not called; ``step.invoke`` raises ``StepError``); ``jobs`` are the jobs ``step.invoke`` runs
    when not mocked; ``base_url`` starts callbacks' URLs. Works for ``def`` and ``async def``
    jobs (call it outside a running event loop)."""
    # A mocked callback has a URL too.
    stored: Dict[str, Dict[str, Any]] = {k: {"output": v, "callback": _callback(k, "")} for k, v in (steps or {}).items()}
    mocked = set(stored)
    failures = dict(fail_steps or {})
    result = RunJobResult()
    run_id = "run_test"
    for _ in range(1000):
        answer = execute(
            job,
            {
                "action": "run",
                "protocol": 2,
                "run": {"id": run_id, "attempt": attempt, "maxAttempts": max_attempts},
                "job": {"id": job.id, "version": job.version},
                "event": {"id": "evt_test", "name": event_name, "payload": payload},
                "steps": stored,
            },
            base_url=base_url,
            mocked=mocked,
            failures=failures,
        )
        result.logs.extend(answer.get("logs", []))
        for s in answer.get("steps", []):
            if "error" in s:
                result.steps.append(s)
                continue
            key = s["key"]
            if key in mocked:
                continue
            result.steps.append(s)
            told: Dict[str, Any] = {"output": s.get("output")}
            op = s["op"]
            if op == "sleep":
                result.sleeps.append({k: v for k, v in s.items() if k != "op"})
            if op == "waitForEvent":
                result.waits.append({k: v for k, v in s.items() if k != "op"})
            if op == "sendEvent":
                result.events.extend(s["events"])
                told = {"output": {"ids": [f"{run_id}-{key}-{e.get('key', i)}" for i, e in enumerate(s["events"])]}}
            if op == "invoke":
                result.invokes.append({k: v for k, v in s.items() if k != "op"})
                told = _invoked(key, s["job"], s["payload"], jobs, base_url)
            if op == "callback":
                deadline = datetime.now(timezone.utc) + timedelta(milliseconds=s["timeoutMs"])
                made = _callback(key, deadline.isoformat().replace("+00:00", "Z"))
                result.callbacks.append({"key": key, "url": flare_url(base_url) + made["path"], "timeoutMs": s["timeoutMs"]})
                told = {"callback": made}
            if op == "waitForCallback":
                told = {**stored.get(key, {}), "output": None}
            stored[key] = told
        if "output" in answer or "error" in answer:
            result.results = {k: v["output"] for k, v in stored.items() if "output" in v}
            result.output = answer.get("output")
            if "error" in answer:
                result.error = answer["error"]
                result.retry = answer.get("retry", True)
            return result
    raise RuntimeError("the job never finished (1000 calls)")


def _invoked(key: str, job_id: str, payload: Any, jobs: Sequence[Job], base_url: Optional[str]) -> Dict[str, Any]:
    """An invoked job's outcome in a test: the job given in ``jobs`` runs."""
    child = next((j for j in jobs if j.id == job_id), None)
    if child is None:
        return {
            "error": f"invoke {key!r}: job {job_id!r} is neither mocked nor given to run_job: "
            "give the step's result in steps=, or the job in jobs="
        }
    r = run_job(child, payload, event_name="flare/job.invoked", jobs=jobs, base_url=base_url)
    if r.error is not None:
        return {"error": f"invoke {key!r}: run run_test failed: {r.error}"}
    return {"output": r.output}
