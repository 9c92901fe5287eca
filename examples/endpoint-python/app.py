"""Flare jobs in Python, served by FastAPI: ``POST /flare`` answers Flare (the SDK verifies each
request's signature). Run it with

    FLARE_ENDPOINT_SECRET=whsec_... python3 app.py        # or: uvicorn app:app --port 4001

then ``flare serve --endpoint http://127.0.0.1:4001/flare`` (see README.md)."""

import os

from fastapi import FastAPI

from flare_sdk import serve_asgi
from jobs import JOBS

app = FastAPI()
# A route, not a mount: a mount answers POST /flare with a redirect to /flare/.
app.add_route("/flare", serve_asgi(JOBS), methods=["POST"])  # secret: FLARE_ENDPOINT_SECRET


@app.get("/")
def home() -> dict:
    """The rest of your application goes on as usual."""
    return {"jobs": [job.id for job in JOBS]}


if __name__ == "__main__":
    import uvicorn

    port, host = int(os.environ.get("PORT", "4001")), os.environ.get("HOST", "127.0.0.1")
    print(f"Flare endpoint on http://{host}:{port}/flare with jobs {', '.join(j.id for j in JOBS)}", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
