"""Dash's scripts, compressed once and kept: what a browser downloads to draw any page.

Dash serves its component suites (React, its renderer, the core components, plotly.js:
6 MB, plotly.js alone 4.8 MB) from the installed packages, uncompressed, and reads and
hashes each file again on every request: the fingerprinted ones carry a year's
``Cache-Control``, but those loaded on demand (plotly.js, the graph and dropdown
components) carry only an ETag, so every page load that draws a chart asked for plotly.js
again, and the server read and hashed 4.8 MB to answer 304.

`ScriptCache` answers those requests from memory: each file as Dash first served it, its
gzip form (made once, 1.4 MB for plotly.js) for a browser that accepts it, and 304 for an
ETag that still matches, without reading the file. The same goes for the page's stylesheet
and icon (``/assets/...?m=<mtime>``, ``/_favicon.ico?v=<version>``), which Dash sends with
an ETag only: a URL that names its version (Dash's fingerprinted script names, an ``m=`` or
``v=`` query) is kept by the browser for a year, so a returning page load asks for none
of them again. The packages do not change while the
server runs, so nothing is ever stale; Starlette's ``GZipMiddleware`` would compress every
API answer too, and plotly.js again for each new visitor.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import anyio
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import vendor

__all__ = ["KEPT_PREFIXES", "SCRIPTS_PREFIX", "ScriptCache"]

SCRIPTS_PREFIX = "/_dash-component-suites/"
KEPT_PREFIXES = (SCRIPTS_PREFIX, "/assets/", "/_favicon.ico")
"""Paths answered from memory: Dash's scripts, the app's assets, the icon."""
FULL_PLOTLY = SCRIPTS_PREFIX + "plotly/package_data/plotly.min.js"
"""Where Dash's graphs load plotly.js from (a path fixed in Dash's renderer)."""
PARTIAL_PLOTLY = Path(vendor.__file__).resolve().parent / vendor.BUNDLE
LONG_CACHE = "public, max-age=31536000, immutable"
VERSIONED = re.compile(r"\.v[0-9a-z_]+m[0-9]+\.|[?&][mv]=[^&]+")
"""A fingerprinted file name (``graph.v4_4_1m1796655650.js``) or a version query."""
MIN_BYTES = 1024
"""Smaller files go as they are: gzip would save little."""
MAX_KEPT = 128
"""Files kept at most (Dash serves a few dozen)."""


@dataclass(frozen=True)
class _Kept:
    headers: list[tuple[bytes, bytes]]
    body: bytes
    gzipped: bytes | None
    etag: str | None


class ScriptCache:
    """ASGI middleware: GET requests under `KEPT_PREFIXES` answered from memory (see the
    module notes); everything else passes through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._kept: dict[str, _Kept] = {}
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if scope.get("method") != "GET" or not path.startswith(KEPT_PREFIXES):
            await self.app(scope, receive, send)
            return
        key = path + "?" + scope.get("query_string", b"").decode("latin-1")
        headers = Headers(scope=scope)
        kept = self._kept.get(key)
        if kept is None:
            kept = await self._first(scope, receive, send, key)
            if kept is None:
                return  # answered by Dash as it was (an error, a 304, ...)
        await _answer(kept, headers, send)

    async def _first(self, scope: Scope, receive: Receive, send: Send, key: str) -> _Kept | None:
        """Let Dash answer; keep a 200 and return it to be sent, else pass Dash's answer on."""
        start: Message | None = None
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, capture)
        assert start is not None
        response = MutableHeaders(raw=list(start.get("headers", [])))
        body = b"".join(chunks)
        if start["status"] != 200 or "content-encoding" in response:
            await send(start)
            await send({"type": "http.response.body", "body": body})
            return None
        if key.startswith(FULL_PLOTLY + "?"):
            body = PARTIAL_PLOTLY.read_bytes()
            response["etag"] = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        gzipped = None
        if len(body) >= MIN_BYTES:
            gzipped = await anyio.to_thread.run_sync(gzip.compress, body, 9)
            if len(gzipped) >= len(body):
                gzipped = None
        del response["content-length"]
        if VERSIONED.search(key):
            response["cache-control"] = LONG_CACHE
        kept = _Kept(response.raw, body, gzipped, response.get("etag"))
        with self._lock:
            if len(self._kept) < MAX_KEPT:
                self._kept[key] = kept
        return kept


async def _answer(kept: _Kept, request: Headers, send: Send) -> None:
    headers = MutableHeaders(raw=list(kept.headers))
    headers["vary"] = "Accept-Encoding"
    if kept.etag is not None and request.get("if-none-match") == kept.etag:
        await send({"type": "http.response.start", "status": 304, "headers": headers.raw})
        await send({"type": "http.response.body", "body": b""})
        return
    body = kept.body
    if kept.gzipped is not None and "gzip" in request.get("accept-encoding", ""):
        body = kept.gzipped
        headers["content-encoding"] = "gzip"
    headers["content-length"] = str(len(body))
    await send({"type": "http.response.start", "status": 200, "headers": headers.raw})
    await send({"type": "http.response.body", "body": body})
