"""Testing a job without Flare: :func:`run_job` runs it as Flare would (called again after each
step, sleeps over at once, waits for events timed out unless mocked, events recorded, not sent),
with chosen step results (mocks)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from .execute import execute
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
    logs: List[Dict[str, Any]] = field(default_factory=list)


def run_job(
    job: Job,
    payload: Any = None,
    *,
    event_name: str = "test",
    steps: Optional[Mapping[str, Any]] = None,
    attempt: int = 1,
    max_attempts: int = 3,
) -> RunJobResult:
    """Runs ``job`` to its end for an event with ``payload``; ``steps`` maps step keys to the
    results they return without running (mocks). Works for ``def`` and ``async def`` jobs (call
    it outside a running event loop)."""
    stored: Dict[str, Dict[str, Any]] = {k: {"output": v} for k, v in (steps or {}).items()}
    mocked = set(stored)
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
            mocked,
        )
        result.logs.extend(answer.get("logs", []))
        for s in answer.get("steps", []):
            if "error" in s:
                result.steps.append(s)
                continue
            if s["key"] in mocked:
                continue
            result.steps.append(s)
            output: Any = s.get("output")
            if s["op"] == "sleep":
                result.sleeps.append({k: v for k, v in s.items() if k != "op"})
            if s["op"] == "waitForEvent":
                result.waits.append({k: v for k, v in s.items() if k != "op"})
            if s["op"] == "sendEvent":
                result.events.extend(s["events"])
                output = {"ids": [f"{run_id}-{s['key']}-{e.get('key', i)}" for i, e in enumerate(s["events"])]}
            stored[s["key"]] = {"output": output}
        if "output" in answer or "error" in answer:
            result.results = {k: v["output"] for k, v in stored.items() if "output" in v}
            result.output = answer.get("output")
            if "error" in answer:
                result.error = answer["error"]
                result.retry = answer.get("retry", True)
            return result
    raise RuntimeError("the job never finished (1000 calls)")
