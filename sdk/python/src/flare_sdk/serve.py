"""Adapters: the endpoint as an ASGI app (FastAPI, Starlette, any ASGI server), a WSGI app (Flask,
Django) and a standard library ``http.server`` handler."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Awaitable, Callable, Dict, Iterable, List, MutableMapping, Optional, Sequence, Type, Union

from .handler import MAX_BODY_BYTES, Handler
from .job import Job

Secret = Union[str, Sequence[str], None]
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_TOO_LARGE = b'{"error": "the body is too large"}'
_POST_ONLY = b'{"error": "Flare calls with POST"}'


class AsgiApp:
    """The endpoint as an ASGI app. An object, not a function, so that Starlette and FastAPI route
    to it as an app: ``app.add_route("/flare", serve_asgi(jobs), methods=["POST"])`` answers
    ``POST /flare`` itself (``app.mount("/flare", …)`` would answer it with a redirect to
    ``/flare/``, which Flare does not follow)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        status, body = 405, _POST_ONLY
        if scope["method"] == "POST":
            chunks: List[bytes] = []
            size, more = 0, True
            while more:
                message = await receive()
                chunk = message.get("body", b"")
                size += len(chunk)
                chunks.append(chunk)
                more = message.get("more_body", False)
            if size > MAX_BODY_BYTES:
                status, body = 413, _TOO_LARGE
            else:
                headers: Dict[str, str] = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
                status, body = await self.handler.handle_async(b"".join(chunks), headers.get)
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


def serve_asgi(jobs: Sequence[Job], secret: Secret = None, base_url: Optional[str] = None) -> AsgiApp:
    """An ASGI app: in FastAPI or Starlette ``app.add_route("/flare", serve_asgi([job]),
    methods=["POST"])``; alone, ``uvicorn module:app``. ``async def`` jobs run in the event loop,
    plain ``def`` jobs in a worker thread. ``base_url``: Flare's address for callbacks' URLs
    (default ``FLARE_URL``)."""
    return AsgiApp(Handler(jobs, secret, base_url))


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large"}


def serve_wsgi(
    jobs: Sequence[Job], secret: Secret = None, base_url: Optional[str] = None
) -> Callable[[Dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """A WSGI app: in Flask, ``DispatcherMiddleware(app.wsgi_app, {"/flare": serve_wsgi([job])})``;
    in Django, route to it from ``wsgi.py`` the same way."""
    handler = Handler(jobs, secret, base_url)

    def app(environ: Dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        status, body = 405, _POST_ONLY
        if environ.get("REQUEST_METHOD") == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            if length > MAX_BODY_BYTES:
                status, body = 413, _TOO_LARGE
            else:
                raw = environ["wsgi.input"].read(length)
                status, body = handler.handle(raw, lambda h: environ.get("HTTP_" + h.upper().replace("-", "_")))
        start_response(f"{status} {_REASONS.get(status, 'Error')}", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    return app


def request_handler(
    jobs: Sequence[Job], secret: Secret = None, path: Optional[str] = "/flare", base_url: Optional[str] = None
) -> Type[BaseHTTPRequestHandler]:
    """A ``BaseHTTPRequestHandler`` class for the standard library's ``http.server``, answering
    ``POST path`` (any path when ``None``) and 404 elsewhere."""
    handler = Handler(jobs, secret, base_url)

    class FlareRequestHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: Flare reuses its connections

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("content-length") or 0)
            if path is not None and self.path.split("?", 1)[0] != path:
                status, body = 404, json.dumps({"error": f"not found: Flare calls POST {path}"}).encode()
            elif length > MAX_BODY_BYTES:
                status, body = 413, _TOO_LARGE
            else:
                status, body = handler.handle(self.rfile.read(length), self.headers.get)
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return FlareRequestHandler


def serve_http(
    jobs: Sequence[Job],
    port: int = 4000,
    host: str = "127.0.0.1",
    secret: Secret = None,
    path: Optional[str] = "/flare",
    base_url: Optional[str] = None,
) -> ThreadingHTTPServer:
    """Serves ``jobs`` at ``http://host:port/flare`` (``path``) with the standard library until
    interrupted."""
    server = ThreadingHTTPServer((host, port), request_handler(jobs, secret, path, base_url))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return server


__all__ = ["AsgiApp", "serve_asgi", "serve_wsgi", "request_handler", "serve_http"]
