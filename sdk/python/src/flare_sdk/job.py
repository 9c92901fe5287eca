"""Jobs: their definition (what Flare indexes) and the function that runs them."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Union

JobFn = Callable[[Any], Any]


class NonRetriableError(Exception):
    """An error that no retry can fix: the run fails at once, without the attempts left."""


class StepError(Exception):
    """A step that failed as Flare reports it: an invoked job's run that failed, was cancelled or
    did not end in time. Not caught, it fails the attempt (the job's retry policy applies)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        """The step's key."""


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
    concurrency: Any = None
    throttle: Optional[Mapping[str, Any]] = None
    rate_limit: Optional[Mapping[str, Any]] = None
    start_timeout_ms: Optional[int] = None
    debounce: Optional[Mapping[str, Any]] = None
    priority: Optional[Mapping[str, Any]] = None
    cancel_on: Optional[Sequence[Mapping[str, Any]]] = None
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
        for name, value in (
            ("concurrency", self.concurrency),
            ("throttle", self.throttle),
            ("rateLimit", self.rate_limit),
            ("startTimeoutMs", self.start_timeout_ms),
            ("debounce", self.debounce),
            ("priority", self.priority),
        ):
            if value is not None:
                entry[name] = dict(value) if isinstance(value, Mapping) else value
        if self.cancel_on is not None:
            entry["cancelOn"] = [dict(c) for c in self.cancel_on]
        return entry


def define_job(
    id: str,
    *,
    trigger: Mapping[str, Any],
    name: Optional[str] = None,
    version: str = "1.0.0",
    retry: Optional[Mapping[str, Any]] = None,
    timeout_ms: Optional[int] = None,
    concurrency: Union[int, Mapping[str, Any], Sequence[Mapping[str, Any]], None] = None,
    throttle: Optional[Mapping[str, Any]] = None,
    rate_limit: Optional[Mapping[str, Any]] = None,
    start_timeout_ms: Optional[int] = None,
    debounce: Optional[Mapping[str, Any]] = None,
    priority: Optional[Mapping[str, Any]] = None,
    cancel_on: Optional[Sequence[Mapping[str, Any]]] = None,
) -> Callable[[JobFn], Job]:
    """Defines a job with the decorated function.

    ``trigger`` is ``{"event": "user.created", "filter": {...}}`` or
    ``{"schedule": {"cron": "0 9 * * 1-5", "timezone": "Europe/Paris"}}`` /
    ``{"schedule": {"intervalSeconds": 300}}``; ``retry`` has ``maxAttempts``, ``minDelayMs``,
    ``maxDelayMs``, ``factor``. Flow control (docs/flow-control.md): ``concurrency`` (a number,
    ``{"limit": 1, "key": "event.payload.customerId"}``, ``{"limit": 10, "group": "openai"}``, or
    a list of two), ``throttle`` (``{"limit", "periodMs", "key"?, "burst"?}``), ``rate_limit``
    (``{"limit", "periodMs", "key"?}``), ``start_timeout_ms``, ``debounce``
    (``{"periodMs", "key"?, "timeoutMs"?}``: a burst of events per key becomes one run),
    ``priority`` (``{"run": "<CEL giving seconds, -600..600>"}``). ``cancel_on``: events that
    cancel the job's runs, ``[{"event": "order.cancelled", "match": "payload.orderId",
    "if"?: "<CEL>", "timeoutMs"?: n}]``. Flare checks each when it reads the index.
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
            concurrency=[dict(c) for c in concurrency] if isinstance(concurrency, (list, tuple)) else concurrency,
            throttle=throttle,
            rate_limit=rate_limit,
            start_timeout_ms=start_timeout_ms,
            debounce=debounce,
            priority=priority,
            cancel_on=cancel_on,
            is_async=inspect.iscoroutinefunction(fn),
        )

    return wrap
