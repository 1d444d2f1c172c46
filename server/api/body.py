"""Request bodies read under a size limit, gzip inflated without trusting it."""

from __future__ import annotations

import zlib

from fastapi import HTTPException, Request


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
        raise HTTPException(415, f"unsupported Content-Encoding {encoding!r}; use gzip or none")
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
                raise HTTPException(400, f"body is not valid gzip: {exc}") from None
            size += len(out)
            if size > limit:
                raise _too_large(limit)
            parts.append(out)
            data = inflater.unconsumed_tail
            if inflater.eof:
                break
    if inflater is not None and not inflater.eof and wire:
        raise HTTPException(400, "body is truncated gzip")
    return b"".join(parts)


def _too_large(limit: int) -> HTTPException:
    return HTTPException(413, f"body larger than {limit} bytes (after decompression)")
