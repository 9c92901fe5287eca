"""Flare's Python SDK: jobs with durable steps over HTTP (protocol version 2 of
docs/endpoints.md). Define jobs with :func:`define_job`, serve them with :func:`serve_asgi`,
:func:`serve_wsgi` or :func:`serve_http`, send events with :class:`Flare`; test them with
:func:`flare_sdk.testing.run_job`."""

from .client import Flare, FlareError
from .duration import Duration, to_ms
from .execute import (
    AsyncContext,
    AsyncStep,
    Callback,
    Context,
    Event,
    Logger,
    RunInfo,
    Step,
    SyncContext,
    WaitedEvent,
    execute,
    execute_async,
)
from .handler import MAX_BODY_BYTES, PROTOCOL_VERSION, Handler
from .job import Job, NonRetriableError, StepError, define_job
from .serve import AsgiApp, request_handler, serve_asgi, serve_http, serve_wsgi
from .signature import TOLERANCE_SECONDS, SignatureError, sign, verify

__version__ = "2.0.0"
"""This package's version: its major is the protocol version it speaks."""

__all__ = [
    "AsgiApp",
    "AsyncContext",
    "AsyncStep",
    "Callback",
    "Context",
    "Duration",
    "Event",
    "Flare",
    "FlareError",
    "Handler",
    "Job",
    "Logger",
    "MAX_BODY_BYTES",
    "NonRetriableError",
    "PROTOCOL_VERSION",
    "RunInfo",
    "SignatureError",
    "Step",
    "StepError",
    "SyncContext",
    "TOLERANCE_SECONDS",
    "WaitedEvent",
    "define_job",
    "execute",
    "execute_async",
    "request_handler",
    "serve_asgi",
    "serve_http",
    "serve_wsgi",
    "sign",
    "to_ms",
    "verify",
]
