"""Dash's scripts from memory: gzip for a browser that takes it, the file as it is for one
that does not, 304 for an ETag that still matches, each file read from Dash once, a year's
cache for a URL that names its version; and on the real server, plotly.js as its cartesian
bundle, compressed, and the page's every script, stylesheet and icon kept for a year."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from normwatch.dashboard import vendor
from normwatch.dashboard.scripts import SCRIPTS_PREFIX, ScriptCache
from normwatch.testing import ServerProcess
from tests.helpers.coroutines import run_async
from tests.helpers.tenants import make_tenant

SCRIPT = b"function draw(figure) { return figure; }\n" * 400


def dash_like() -> tuple[Starlette, list[str]]:
    """Scripts served as Dash serves them (an ETag, no encoding), and every request seen."""
    seen: list[str] = []

    async def script(request: Request) -> Response:
        seen.append(request.url.path)
        name = request.path_params["name"]
        if name == "missing.js":
            return PlainTextResponse("no such file", status_code=404)
        body = b"x" if name == "tiny.js" else SCRIPT
        return Response(body, media_type="application/javascript", headers={"ETag": '"abc"'})

    async def other(request: Request) -> Response:
        seen.append(request.url.path)
        return PlainTextResponse("page " * 400)

    routes = [
        Route(SCRIPTS_PREFIX + "dash/{name}", script),
        Route("/assets/{name}", script),
        Route("/runs", other),
    ]
    return Starlette(routes=routes), seen


def test_scripts_are_compressed_once_and_answered_from_memory() -> None:
    app, seen = dash_like()

    async def call() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=ScriptCache(app))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            path = SCRIPTS_PREFIX + "dash/graph.js"
            return [
                await client.get(path, headers={"Accept-Encoding": "gzip"}),
                await client.get(path, headers={"Accept-Encoding": "gzip, deflate"}),
                await client.get(path, headers={"Accept-Encoding": "identity"}),
                await client.get(path, headers={"If-None-Match": '"abc"'}),
                await client.get(path, headers={"If-None-Match": '"old"'}),
                await client.get(SCRIPTS_PREFIX + "dash/tiny.js"),
                await client.get(SCRIPTS_PREFIX + "dash/missing.js"),
                await client.get(SCRIPTS_PREFIX + "dash/missing.js"),
                await client.get("/runs", headers={"Accept-Encoding": "gzip"}),
            ]

    first, again, plain, unchanged, changed, tiny, missing, still, page = run_async(call())
    for answer in (first, again):
        assert answer.headers["content-encoding"] == "gzip"
        assert answer.content == SCRIPT  # httpx inflates it
        assert int(answer.headers["content-length"]) < len(SCRIPT) // 10
        assert answer.headers["vary"] == "Accept-Encoding"
        assert answer.headers["etag"] == '"abc"'
    assert "content-encoding" not in plain.headers and plain.content == SCRIPT
    assert unchanged.status_code == 304 and unchanged.content == b""
    assert changed.status_code == 200 and changed.content == SCRIPT
    assert "content-encoding" not in tiny.headers and tiny.content == b"x"
    assert missing.status_code == still.status_code == 404
    assert "content-encoding" not in page.headers
    # Each script read from Dash once; a missing one and other pages every time.
    assert seen == [
        SCRIPTS_PREFIX + "dash/graph.js",
        SCRIPTS_PREFIX + "dash/tiny.js",
        SCRIPTS_PREFIX + "dash/missing.js",
        SCRIPTS_PREFIX + "dash/missing.js",
        "/runs",
    ]


def test_the_servers_plotly_js_is_the_cartesian_bundle_compressed(
    pg_server: ServerProcess,
) -> None:
    tenant = make_tenant(pg_server.database_url)
    with httpx.Client(base_url=pg_server.url, timeout=30) as browser:
        assert browser.get("/login", params={"token": tenant.read}).status_code == 303
        path = "/_dash-component-suites/plotly/package_data/plotly.min.js"
        raw = browser.get(path, headers={"Accept-Encoding": "identity"})
        packed = browser.stream("GET", path, headers={"Accept-Encoding": "gzip"})
        with packed as answer:
            body = b"".join(answer.iter_raw())
            assert answer.headers["content-encoding"] == "gzip"
        assert raw.status_code == 200
        assert raw.content == (Path(vendor.__file__).parent / vendor.BUNDLE).read_bytes()
        assert raw.content.startswith(b"/**\n* plotly.js (cartesian - minified) v4.1.1\n")
        assert len(body) < len(raw.content) // 2
        assert gzip.decompress(body) == raw.content
        etag = raw.headers["etag"]
        assert etag == '"' + vendor.SHA256[:32] + '"'
        again = browser.get(path, headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b""
        # The security headers still come with it.
        assert answer.headers["x-content-type-options"] == "nosniff"


def test_a_url_that_names_its_version_is_kept_a_year() -> None:
    app, seen = dash_like()

    async def call() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=ScriptCache(app))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return [
                await client.get(SCRIPTS_PREFIX + "dash/graph.v4_4_1m1796655650.js"),
                await client.get("/assets/site.css", params={"m": "1796655723.70"}),
                await client.get("/assets/site.css"),
                await client.get(SCRIPTS_PREFIX + "dash/graph.js"),
            ]

    fingerprinted, queried, plain_asset, plain_script = run_async(call())
    for answer in (fingerprinted, queried):
        assert answer.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert answer.headers["content-encoding"] == "gzip"
    for answer in (plain_asset, plain_script):
        assert "cache-control" not in answer.headers
        assert answer.headers["etag"] == '"abc"'
    assert seen == [
        SCRIPTS_PREFIX + "dash/graph.v4_4_1m1796655650.js",
        "/assets/site.css",
        "/assets/site.css",
        SCRIPTS_PREFIX + "dash/graph.js",
    ]


def test_every_file_of_a_page_is_compressed_and_kept_a_year(pg_server: ServerProcess) -> None:
    """What a returning browser asks again on a page load: the page itself only."""
    tenant = make_tenant(pg_server.database_url)
    with httpx.Client(base_url=pg_server.url, timeout=30) as browser:
        assert browser.get("/login", params={"token": tenant.read}).status_code == 303
        page = browser.get("/")
        files = re.findall(r'(?:src|href)="(/[^"]+)"', page.text)
        assert len(files) == 11
        for path in files:
            with browser.stream("GET", path, headers={"Accept-Encoding": "gzip"}) as answer:
                sent = len(b"".join(answer.iter_raw()))
                assert answer.status_code == 200, path
                assert answer.headers["cache-control"] == "public, max-age=31536000, immutable"
                if sent > 1024:
                    assert answer.headers["content-encoding"] == "gzip", path
