"""One call of a job under protocol version 2 (docs/endpoints.md, "Protocol version 2").

The job runs from the top; stored steps return their results; new ``run`` steps run and are
reported; a sleep, a wait, a send, a child run or a callback stops the job there (an exception
derived from ``BaseException``, so ``except Exception`` in the job does not swallow it); the
answer says what was reached.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Set, TypedDict, Union

from .duration import Duration, to_ms
from .job import Job, NonRetriableError, StepError

MAX_STEPS_PER_ANSWER = 100
"""Most steps one answer reports (Flare's bound): past it the answer goes, and Flare calls again."""

ANSWER_SOFT_LIMIT_BYTES = 512 * 1024
"""Reported outputs past this size (bytes of JSON) end the answer before the next new step, well
inside Flare's 1 MiB bound on an answer."""

EventToSend = Mapping[str, Any]
"""``{"name": …, "payload": …, "delay"?: "1h", "deliverAt"?: …, "context"?: …, "key"?: …}``"""


class WaitedEvent(TypedDict):
    """The event a ``wait_for_event`` step resumed with."""

    id: str
    name: str
    payload: Any
    timestamp: str
    """When it was sent (RFC 3339)."""


@dataclass(frozen=True)
class Callback:
    """What ``step.callback`` makes: a URL that a ``POST`` of JSON answers, once, until its
    deadline. Hand ``url`` on (in a ``step.run``), then ``step.wait_for_callback(callback)``."""

    key: str
    """The step's key."""
    token: str
    """The unguessable token (empty once the callback timed out)."""
    path: str
    """``/callbacks/<token>``: Flare's path for the post (empty once the callback timed out)."""
    url: str
    """The URL to hand on: Flare's address (``base_url``, ``FLARE_URL``) and ``path``."""
    deadline: str
    """When Flare stops accepting the post (RFC 3339)."""


def flare_url(base_url: Optional[str] = None) -> str:
    """Flare's address as the SDK defaults it: ``base_url``, else ``FLARE_URL``, else
    ``http://127.0.0.1:3000``."""
    return (base_url or os.environ.get("FLARE_URL") or "http://127.0.0.1:3000").rstrip("/")


class _Suspend(BaseException):
    """Stops the job at a step Flare carries out (a sleep, a wait, a send). Never catch it."""


class _Nondeterminism(BaseException):
    """The job's code no longer matches the run's stored steps."""


def _message(e: BaseException) -> str:
    text = str(e)
    return text if text else type(e).__name__


def event_body(e: EventToSend) -> Dict[str, Any]:
    """An event as the protocol has it."""
    body: Dict[str, Any] = {"name": e["name"], "payload": e.get("payload")}
    for k in ("key", "context"):
        if e.get(k) is not None:
            body[k] = e[k]
    if e.get("delay") is not None:
        delay = e["delay"]
        body["delay"] = delay if isinstance(delay, str) else f"{round(to_ms(delay) / 1000)}s"
    at = e.get("deliverAt", e.get("deliver_at"))
    if at is not None:
        body["deliverAt"] = at.isoformat() if isinstance(at, datetime) else str(at)
    return body


def _iso(at: Union[datetime, str]) -> str:
    if isinstance(at, str):
        at = datetime.fromisoformat(at.replace("Z", "+00:00"))
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    return at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


class _State:
    """What one call has seen and reported."""

    def __init__(
        self,
        stored: Mapping[str, Mapping[str, Any]],
        mocked: Set[str],
        failures: Mapping[str, str],
        base_url: Optional[str],
    ) -> None:
        self.stored = stored
        # Steps reached in an earlier call: completed ones, and callbacks made.
        self.done = {k for k, v in stored.items() if "output" in v or "callback" in v}
        self.mocked = mocked
        self.failures = failures
        self.base_url = flare_url(base_url)
        self.used: Set[str] = set()
        self.callbacks: Set[str] = set()
        self.waited: Set[str] = set()
        self.reported: List[Dict[str, Any]] = []
        self.logs: List[Dict[str, Any]] = []
        self.suspended = False
        self.broken: Optional[str] = None
        self.reported_bytes = 0

    def take(self, key: str) -> Optional[Mapping[str, Any]]:
        if self.suspended:
            raise _Suspend()
        if self.broken is not None:
            raise _Nondeterminism(self.broken)
        if not isinstance(key, str) or not key or len(key.encode()) > 200:
            self.broken = f"invalid step key {key!r}: use 1-200 bytes"
            raise _Nondeterminism(self.broken)
        if key in self.used:
            self.broken = f"step key {key!r} is used twice in this run: step keys must be unique within a run"
            raise _Nondeterminism(self.broken)
        self.used.add(key)
        s = self.stored.get(key)
        if s is None:
            self.check_all_reached()
        if s is None or "output" not in s:
            self.full()
        return s

    def full(self) -> None:
        if len(self.reported) >= MAX_STEPS_PER_ANSWER or self.reported_bytes > ANSWER_SOFT_LIMIT_BYTES:
            # This answer is full: Flare stores what it has and calls again, and this step runs then.
            self.suspended = True
            raise _Suspend()

    def fail(self, why: str) -> None:
        self.broken = why
        raise _Nondeterminism(why)

    def check_all_reached(self) -> None:
        # Mocked steps (testing) may be mocked ahead of steps that run.
        missed = sorted(self.done - self.used - self.mocked)
        if missed:
            self.broken = (
                f"the job's code changed while the run was in progress: step {missed[0]!r} is stored "
                "but was not reached (step keys must come in the same order on every call)"
            )
            raise _Nondeterminism(self.broken)

    def replaying(self) -> bool:
        return any(k not in self.used and k not in self.mocked for k in self.done)

    def suspend(self, step: Dict[str, Any]) -> None:
        self.reported.append(step)
        self.suspended = True
        raise _Suspend()

    def ran(self, key: str, value: Any) -> Any:
        text = json.dumps(value)
        self.reported_bytes += len(text)
        output = json.loads(text)
        self.reported.append({"key": key, "op": "run", "output": output})
        return output

    def forced(self, key: str) -> None:
        """A ``run`` step whose failure a test chose: reported, raised."""
        failure = self.failures.get(key)
        if failure is not None:
            self.reported.append({"key": key, "op": "run", "error": failure})
            raise RuntimeError(failure)

    def failed(self, key: str, e: BaseException) -> None:
        if not isinstance(e, (_Suspend, _Nondeterminism)):
            self.reported.append({"key": key, "op": "run", "error": _message(e)})

    def sleep(self, key: str, duration: Duration) -> None:
        s = self.take(key)
        if s is None or "output" not in s:
            self.suspend({"key": key, "op": "sleep", "durationMs": to_ms(duration)})

    def sleep_until(self, key: str, at: Union[datetime, str]) -> None:
        s = self.take(key)
        if s is None or "output" not in s:
            self.suspend({"key": key, "op": "sleep", "until": _iso(at)})

    def wait_for_event(
        self, key: str, event: str, timeout: Duration, match: Optional[str], if_: Optional[str]
    ) -> Optional[WaitedEvent]:
        s = self.take(key)
        if s is not None and "output" in s:
            output: Optional[WaitedEvent] = s["output"]
            return output
        if not isinstance(event, str) or not event:
            raise ValueError(f"step {key!r}: wait_for_event needs the name of the event waited for (event=)")
        wait: Dict[str, Any] = {"key": key, "op": "waitForEvent", "event": event, "timeoutMs": to_ms(timeout)}
        if match is not None:
            wait["match"] = match
        if if_ is not None:
            wait["if"] = if_
        self.suspend(wait)
        raise AssertionError("unreachable")

    def send_event(self, key: str, events: Union[EventToSend, Sequence[EventToSend]]) -> Dict[str, Any]:
        s = self.take(key)
        if s is not None and "output" in s:
            return dict(s["output"])
        items = [events] if isinstance(events, Mapping) else list(events)
        self.suspend({"key": key, "op": "sendEvent", "events": [event_body(e) for e in items]})
        raise AssertionError("unreachable")

    def invoke(self, key: str, job: Union[str, Job], payload: Any, timeout: Duration) -> Any:
        s = self.take(key)
        failure = self.failures.get(key)
        if failure is not None:
            raise StepError(key, failure)
        if s is not None and "output" in s:
            return s["output"]
        if s is not None and s.get("error") is not None:
            raise StepError(key, s["error"])
        job_id = job if isinstance(job, str) else getattr(job, "id", None)
        if not isinstance(job_id, str) or not job_id:
            raise ValueError(f"step {key!r}: invoke needs the job to run (job=)")
        self.suspend({"key": key, "op": "invoke", "job": job_id, "payload": payload, "timeoutMs": to_ms(timeout)})
        raise AssertionError("unreachable")

    def callback(self, key: str, timeout: Duration) -> Callback:
        s = self.take(key)
        self.callbacks.add(key)
        if s is not None and ("callback" in s or "output" in s):
            c = s.get("callback") or {}
            path = c.get("path") or ""
            return Callback(
                key=key,
                token=c.get("token") or "",
                path=path,
                url=self.base_url + path if path else "",
                deadline=c.get("deadline") or "",
            )
        self.suspend({"key": key, "op": "callback", "timeoutMs": to_ms(timeout)})
        raise AssertionError("unreachable")

    def wait_for_callback(self, callback: Callback) -> Any:
        if self.suspended:
            raise _Suspend()
        if self.broken is not None:
            raise _Nondeterminism(self.broken)
        key = getattr(callback, "key", None)
        if key not in self.callbacks:
            self.fail(f"step.wait_for_callback({key!r}): wait for what step.callback returned earlier in this run")
        if key in self.waited:
            self.fail(f"step.wait_for_callback({key!r}): this callback is waited for twice")
        assert isinstance(key, str)
        self.waited.add(key)
        s = self.stored.get(key)
        if s is not None and "output" in s:
            return s["output"]
        self.full()
        self.suspend({"key": key, "op": "waitForCallback"})
        raise AssertionError("unreachable")


class Logger:
    """Log lines stored with the run's attempt (shown on Flare's dashboard)."""

    def __init__(self, state: _State) -> None:
        self._state = state

    def _log(self, level: str, message: str, fields: Optional[Mapping[str, Any]]) -> None:
        if self._state.replaying() or self._state.suspended:
            return  # lines of the replayed part were sent by an earlier call
        line: Dict[str, Any] = {"level": level, "message": str(message)}
        if fields is not None:
            line["fields"] = dict(fields)
        self._state.logs.append(line)

    def debug(self, message: str, **fields: Any) -> None:
        self._log("debug", message, fields or None)

    def info(self, message: str, **fields: Any) -> None:
        self._log("info", message, fields or None)

    def warn(self, message: str, **fields: Any) -> None:
        self._log("warn", message, fields or None)

    def error(self, message: str, **fields: Any) -> None:
        self._log("error", message, fields or None)


class Step:
    """Durable steps of a plain ``def`` job: each result is stored by Flare."""

    def __init__(self, state: _State) -> None:
        self._state = state

    def run(self, key: str, fn: Callable[[], Any]) -> Any:
        """Runs ``fn`` as the step ``key`` (unique within the run); its result is stored and
        returned, not run again, on later calls. The result must be JSON."""
        s = self._state.take(key)
        self._state.forced(key)
        if s is not None and "output" in s:
            return s["output"]
        try:
            value = fn()
            if inspect.isawaitable(value):
                raise TypeError(f"step {key!r}: an async function in a plain def job; make the job async def")
        except BaseException as e:
            self._state.failed(key, e)
            raise
        return self._state.ran(key, value)

    def sleep(self, key: str, duration: Duration) -> None:
        """Sleeps durably (the run holds no slot, across Flare restarts)."""
        self._state.sleep(key, duration)

    def sleep_until(self, key: str, at: Union[datetime, str]) -> None:
        """Sleeps until ``at`` durably."""
        self._state.sleep_until(key, at)

    def wait_for_event(
        self,
        key: str,
        *,
        event: str,
        timeout: Duration,
        match: Optional[str] = None,
        if_: Optional[str] = None,
    ) -> Optional[WaitedEvent]:
        """Waits durably (the run holds no slot, across Flare restarts) for the first event named
        ``event`` sent after the run reached this step, at most ``timeout`` (``"3d"``, or ms):
        returns it (``{"id", "name", "payload", "timestamp"}``), or ``None`` after the timeout.
        ``match="payload.<field>"``: only an event whose field equals this run's event's;
        ``if_``: a CEL condition over ``event`` (this run's event) and ``async`` (the incoming
        one), such as ``"async.payload.amount >= event.payload.amount"``."""
        return self._state.wait_for_event(key, event, timeout, match, if_)

    def send_event(self, key: str, events: Union[EventToSend, Sequence[EventToSend]]) -> Dict[str, Any]:
        """Sends events chained to the run, once however often it is called: ``{"ids": [...]}``."""
        return self._state.send_event(key, events)

    def invoke(self, key: str, *, job: Union[str, Job], payload: Any = None, timeout: Duration) -> Any:
        """Runs job ``job`` (its id, or the :class:`Job`) with ``payload`` (a run of that job alone,
        whose event's parent is this run) and returns its output once it succeeded; the run holds
        no slot meanwhile. Its failure, its cancellation or its not ending within ``timeout``
        raises a :class:`StepError`: caught, the job goes on; not caught, the attempt fails and the
        job's retry policy applies (the child is not run again: its outcome is this step's). An
        unknown job fails the run."""
        return self._state.invoke(key, job, payload, timeout)

    def callback(self, key: str, *, timeout: Duration) -> Callback:
        """Makes the callback ``key``: a URL (``callback.url``) that a ``POST`` of JSON to Flare
        answers, once, until ``timeout`` from now. Hand the URL on (in a ``step.run``), then
        :meth:`wait_for_callback`. A post that comes before the wait is kept."""
        return self._state.callback(key, timeout)

    def wait_for_callback(self, callback: Callback) -> Any:
        """Waits durably (the run holds no slot) for the post to ``callback``: returns its JSON
        body, or ``None`` once the callback's deadline passed."""
        return self._state.wait_for_callback(callback)


class AsyncStep:
    """Durable steps of an ``async def`` job: await each."""

    def __init__(self, state: _State) -> None:
        self._state = state

    async def run(self, key: str, fn: Callable[[], Any]) -> Any:
        """As :meth:`Step.run`; ``fn`` may be sync or async."""
        s = self._state.take(key)
        self._state.forced(key)
        if s is not None and "output" in s:
            return s["output"]
        try:
            value = fn()
            if inspect.isawaitable(value):
                value = await value
        except BaseException as e:
            self._state.failed(key, e)
            raise
        return self._state.ran(key, value)

    async def sleep(self, key: str, duration: Duration) -> None:
        """As :meth:`Step.sleep`."""
        self._state.sleep(key, duration)

    async def sleep_until(self, key: str, at: Union[datetime, str]) -> None:
        """As :meth:`Step.sleep_until`."""
        self._state.sleep_until(key, at)

    async def wait_for_event(
        self,
        key: str,
        *,
        event: str,
        timeout: Duration,
        match: Optional[str] = None,
        if_: Optional[str] = None,
    ) -> Optional[WaitedEvent]:
        """As :meth:`Step.wait_for_event`."""
        return self._state.wait_for_event(key, event, timeout, match, if_)

    async def send_event(self, key: str, events: Union[EventToSend, Sequence[EventToSend]]) -> Dict[str, Any]:
        """As :meth:`Step.send_event`."""
        return self._state.send_event(key, events)

    async def invoke(self, key: str, *, job: Union[str, Job], payload: Any = None, timeout: Duration) -> Any:
        """As :meth:`Step.invoke`."""
        return self._state.invoke(key, job, payload, timeout)

    async def callback(self, key: str, *, timeout: Duration) -> Callback:
        """As :meth:`Step.callback`."""
        return self._state.callback(key, timeout)

    async def wait_for_callback(self, callback: Callback) -> Any:
        """As :meth:`Step.wait_for_callback`."""
        return self._state.wait_for_callback(callback)


@dataclass
class Event:
    """The event that started the run."""

    id: str
    name: str
    payload: Any


@dataclass
class RunInfo:
    """The run: ``id`` is the same for every attempt (an idempotency key for side effects)."""

    id: str
    attempt: int
    max_attempts: int


@dataclass
class Context:
    """What a job's function receives; ``step`` is a :class:`Step` or, in ``async def`` jobs, an
    :class:`AsyncStep`."""

    event: Event
    step: Any
    logger: Logger
    run: RunInfo


@dataclass
class SyncContext(Context):
    """The :class:`Context` of a plain ``def`` job, with its step type spelled out."""

    step: Step


@dataclass
class AsyncContext(Context):
    """The :class:`Context` of an ``async def`` job, with its step type spelled out."""

    step: AsyncStep


def _context(request: Mapping[str, Any], state: _State, is_async: bool) -> Context:
    ev, run = request.get("event", {}), request.get("run", {})
    event = Event(id=ev.get("id", ""), name=ev.get("name", ""), payload=ev.get("payload"))
    info = RunInfo(id=run.get("id", ""), attempt=run.get("attempt", 1), max_attempts=run.get("maxAttempts", 1))
    if is_async:
        return AsyncContext(event=event, step=AsyncStep(state), logger=Logger(state), run=info)
    return SyncContext(event=event, step=Step(state), logger=Logger(state), run=info)


def _answer(state: _State, outcome: Optional[BaseException], output: Any) -> Dict[str, Any]:
    if state.broken is not None:
        a: Dict[str, Any] = {"error": state.broken, "retry": False}
        if state.logs:
            a["logs"] = state.logs
        return a
    a = {}
    if state.reported:
        a["steps"] = state.reported
    if state.logs:
        a["logs"] = state.logs
    if state.suspended:
        return a
    if outcome is None:
        try:
            state.check_all_reached()
        except _Nondeterminism:
            return _answer(state, None, None)
        a["output"] = output
    elif isinstance(outcome, NonRetriableError):
        a.update(error=_message(outcome), retry=False)
    else:
        a["error"] = _message(outcome)
    return a


def execute(
    job: Job,
    request: Mapping[str, Any],
    *,
    base_url: Optional[str] = None,
    mocked: Optional[Set[str]] = None,
    failures: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """Runs ``job`` once for the ``run`` request and returns the answer (an ``async def`` job in
    its own event loop). Never raises for what the job does. ``base_url``: Flare's address, the
    start of callbacks' URLs; ``mocked`` and ``failures`` are the testing helper's."""
    if job.is_async:
        return asyncio.run(execute_async(job, request, base_url=base_url, mocked=mocked, failures=failures))
    state = _State(request.get("steps") or {}, mocked or set(), failures or {}, base_url)
    try:
        output = job.fn(_context(request, state, False))
    except (Exception, _Suspend, _Nondeterminism) as e:
        return _answer(state, e, None)
    return _answer(state, None, output)


async def execute_async(
    job: Job,
    request: Mapping[str, Any],
    *,
    base_url: Optional[str] = None,
    mocked: Optional[Set[str]] = None,
    failures: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """As :func:`execute`, in the running loop (a plain ``def`` job in a worker thread)."""
    if not job.is_async:
        return await asyncio.to_thread(execute, job, request, base_url=base_url, mocked=mocked, failures=failures)
    state = _State(request.get("steps") or {}, mocked or set(), failures or {}, base_url)
    try:
        fn: Callable[[Context], Awaitable[Any]] = job.fn
        output = await fn(_context(request, state, True))
    except (Exception, _Suspend, _Nondeterminism) as e:
        return _answer(state, e, None)
    return _answer(state, None, output)
