"""The voice page at ``/``: a browser client of ``/v1/realtime`` that ships with the server.

Static files only (``deployments/web``: the page, its script, the microphone worklet, the
style), served by the ingress itself, with no CDN and no external asset. The page names
them, and the API, relative to itself, so it works wherever the app is mounted (a Serve
``route_prefix``, a path on a shared host).
"""

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

WEB = Path(__file__).parent / "web"


def add_page(api: FastAPI) -> None:
    """Serve the page at ``/`` and its files under ``/static``."""
    api.mount("/static", StaticFiles(directory=WEB), name="static")

    @api.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(WEB / "index.html", headers={"Cache-Control": "no-cache"})
