"""The same jobs served by FastAPI: ``pip install fastapi uvicorn ./sdk/python``, then
``FLARE_ENDPOINT_SECRET=whsec_... uvicorn fastapi_app:app --port 4001`` in this directory.
Flare's endpoint is http://127.0.0.1:4001/flare."""

from fastapi import FastAPI  # type: ignore[import-not-found]

from flare_sdk import serve_asgi
from server import JOBS

app = FastAPI()
app.mount("/flare", serve_asgi(JOBS))
