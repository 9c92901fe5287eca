"""Jobs: their definition (what Flare indexes) and the function that runs them."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional

JobFn = Callable[[Any], Any]


class NonRetriableError(Exception):
    """An error that no retry can fix: the run fails at once, without the attempts left."""


@dataclass(frozen=True)
class Job:
    """A job: its definition and its function (``def`` or ``async def``, taking a Context)."""

    id: str
    fn: JobFn
    trigger: Mapping[str, Any]
    name: Optional[str] = None
    version: str = "1.0.0"
    retry: Optional[Mapping[str, Any]] = None
    timeout_ms: Optional[int] = None
    concurrency: Optional[int] = None
    is_async: bool = field(default=False)

    def index_entry(self) -> Dict[str, Any]:
        """This job's entry in the index answer."""
        entry: Dict[str, Any] = {
            "id": self.id,
            "name": self.name or self.id,
            "version": self.version,
            "trigger": dict(self.trigger),
        }
        if self.retry is not None:
            entry["retry"] = dict(self.retry)
        if self.timeout_ms is not None:
            entry["timeoutMs"] = self.timeout_ms
        if self.concurrency is not None:
            entry["concurrency"] = self.concurrency
        return entry


def define_job(
    id: str,
    *,
    trigger: Mapping[str, Any],
    name: Optional[str] = None,
    version: str = "1.0.0",
    retry: Optional[Mapping[str, Any]] = None,
    timeout_ms: Optional[int] = None,
    concurrency: Optional[int] = None,
) -> Callable[[JobFn], Job]:
    """Defines a job with the decorated function.

    ``trigger`` is ``{"event": "user.created", "filter": {...}}`` or
    ``{"schedule": {"cron": "0 9 * * 1-5", "timezone": "Europe/Paris"}}`` /
    ``{"schedule": {"intervalSeconds": 300}}``; ``retry`` has ``maxAttempts``, ``minDelayMs``,
    ``maxDelayMs``, ``factor``.
    """
    if not re.fullmatch(r"[a-z0-9_-]{1,100}", id):
        raise ValueError(f"invalid job id {id!r}: use 1-100 characters of a-z 0-9 - _")
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ValueError(f"job {id}: version {version!r} is not semver MAJOR.MINOR.PATCH")
    if ("event" in trigger) == ("schedule" in trigger):
        raise ValueError(f"job {id}: the trigger needs either 'event' or 'schedule'")

    def wrap(fn: JobFn) -> Job:
        return Job(
            id=id,
            fn=fn,
            trigger=trigger,
            name=name,
            version=version,
            retry=retry,
            timeout_ms=timeout_ms,
            concurrency=concurrency,
            is_async=inspect.iscoroutinefunction(fn),
        )

    return wrap
