"""The private parts of Dash the dashboard relies on still do what it relies on: a small
FastAPI app with a Dash app on it, started (its lifespan) like the service."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dash
import httpx
import pytest
from dash import html
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse

from normwatch.dashboard.dash_internals import (
    CHECKED_WITH,
    disable_catchall,
    finish_setup,
    render_index,
)
from tests.helpers.coroutines import run_async


def small_app(assets: Path, *, catchall: bool) -> FastAPI:
    """A Dash app on FastAPI with one page route of its own, ``/page``, rendered by
    :func:`render_index`; Dash's catch-all left in place when ``catchall``."""
    server = FastAPI()
    app = dash.Dash(
        __name__,
        server=server,
        serve_locally=True,
        assets_folder=str(assets),  # type: ignore[arg-type]
    )
    app.layout = html.Div("hello", id="hello")
    if not catchall:
        disable_catchall(app)

    async def page(request: Request) -> HTMLResponse:
        return HTMLResponse(render_index(app, request))

    server.add_api_route("/page", page, methods=["GET"])
    return server


def started_get(app: FastAPI, paths: Sequence[str]) -> list[httpx.Response]:
    """GET each of ``paths`` from ``app`` after its startup (Dash adds its catch-all route
    then), in order."""

    async def serve() -> list[httpx.Response]:
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        lifespan = asyncio.create_task(app(scope, inbox.get, outbox.put))
        await inbox.put({"type": "lifespan.startup"})
        assert (await outbox.get())["type"] == "lifespan.startup.complete"
        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                return [await client.get(path) for path in paths]
        finally:
            await inbox.put({"type": "lifespan.shutdown"})
            assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
            await lifespan

    return run_async(serve())


@pytest.fixture
def assets(tmp_path: Path) -> Path:
    (tmp_path / "look.css").write_text("body { color: black; }")
    return tmp_path


def test_a_page_route_renders_dash_index_with_its_assets_as_the_first_request(
    assets: Path,
) -> None:
    (page,) = started_get(small_app(assets, catchall=False), ["/page"])
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    # The index, set up in full although no request of Dash's own came first.
    assert '<div id="react-entry-point">' in page.text
    assert "/assets/look.css" in page.text
    assert "dash-renderer" in page.text


def test_without_the_catchall_unknown_paths_are_404(assets: Path) -> None:
    answers = started_get(small_app(assets, catchall=False), ["/nowhere", "/runs/x", "/"])
    # Dash's own index stays.
    assert [a.status_code for a in answers] == [404, 404, 200]


def test_dash_adds_a_catchall_at_startup_unless_disabled(assets: Path) -> None:
    # What disable_catchall is for: with Dash's route, any path is a page (200).
    (answer,) = started_get(small_app(assets, catchall=True), ["/nowhere"])
    assert answer.status_code == 200


def test_finish_setup_runs_once(assets: Path) -> None:
    server = FastAPI()
    app = dash.Dash(__name__, server=server, assets_folder=str(assets))  # type: ignore[arg-type]
    app.layout = html.Div()
    finish_setup(app)
    finish_setup(app)  # the second call returns at once
    assert any("look.css" in str(css) for css in app.css.get_all_css())


def test_checked_against_the_installed_dash() -> None:
    """Re-read the private calls of ``dash_internals`` on a new Dash, then update this."""
    assert dash.__version__ == CHECKED_WITH
