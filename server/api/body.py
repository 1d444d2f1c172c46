"""Request bodies under size limits: every request's (`RequestBounds`), and a metric batch's
read and gzip-inflated without trusting it (`read_limited_body`)."""

from __future__ import annotations

import zlib

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.middleware.body_limit import RequestBodyLimitMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import ServiceError, TooLarge, Unsupported
from .admission import is_batch


async def read_limited_body(request: Request, limit: int) -> bytes:
    """The request body, gunzipped when ``Content-Encoding: gzip``.

    Raises 413 as soon as either the wire bytes or the inflated bytes pass ``limit``:
    inflation proceeds in bounded steps, so a gzip bomb is refused without ever being
    inflated whole.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip", ""):
        raise Unsupported(f"unsupported Content-Encoding {encoding!r}; use gzip or none")
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS) if encoding == "gzip" else None
    wire = 0
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        wire += len(chunk)
        if wire > limit:
            raise _too_large(limit)
        if inflater is None:
            parts.append(chunk)
            size += len(chunk)
            continue
        data = chunk
        while data:
            try:
                out = inflater.decompress(data, limit + 1 - size)
            except zlib.error as exc:
                raise ServiceError(f"body is not valid gzip: {exc}") from None
            size += len(out)
            if size > limit:
                raise _too_large(limit)
            parts.append(out)
            data = inflater.unconsumed_tail
            if inflater.eof:
                break
    if inflater is not None and not inflater.eof and wire:
        raise ServiceError("body is truncated gzip")
    return b"".join(parts)


def _too_large(limit: int) -> TooLarge:
    return TooLarge(f"body larger than {limit} bytes (after decompression)")


class RequestBounds:
    """Pure ASGI middleware: what any request may carry.

    - A body: metric batches up to ``ingest`` bytes (the route checks the inflated size
      too, see `read_limited_body`), every other request ``default`` bytes. A declared
      ``Content-Length`` past the bound is answered 413 at once, before admission and
      without reading a byte; a body that streams past it is cut off by Starlette's
      `RequestBodyLimitMiddleware` as soon as it does.
    - A path and query without NUL characters (``%00``), which no text column can store
      and no name contains: 400.
    """

    def __init__(self, app: ASGIApp, default: int, ingest: int) -> None:
        self.limits = (default, ingest)
        self.counted = (
            RequestBodyLimitMiddleware(app, default),
            RequestBodyLimitMiddleware(app, ingest),
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.counted[0].app(scope, receive, send)
            return
        if b"%00" in scope.get("query_string", b"") or "\x00" in scope["path"]:
            await JSONResponse(
                {"detail": "the URL contains a NUL character (%00)"}, status_code=400
            )(scope, receive, send)
            return
        which = 1 if is_batch(scope) else 0
        limit = self.limits[which]
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            response = JSONResponse(
                {"detail": f"body of {declared} bytes is larger than the limit of {limit}"},
                status_code=413,
                headers={"Connection": "close"},
            )
            await response(scope, receive, send)
            return
        await self.counted[which](scope, receive, send)


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            text = value.strip()
            return int(text) if text.isdigit() else None
    return None
