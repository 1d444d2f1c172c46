"""Browser-side hardening of the service: security headers and a same-origin check.

:class:`BrowserSecurity` is a pure ASGI middleware installed by the dashboard on the whole
service. It

- adds to every HTTP answer (pages, Dash's JSON, the API) a Content-Security-Policy,
  ``X-Frame-Options: DENY``, ``X-Content-Type-Options: nosniff``,
  ``Referrer-Policy: same-origin`` and ``Cross-Origin-Opener-Policy: same-origin``, and
  ``Strict-Transport-Security`` when the request came over https; a header the answer
  already has is left as it is;
- answers 403 to a state-changing request (POST, PUT, PATCH, DELETE) of the dashboard
  (``/_dash-update-component`` and any other path outside ``/api/``, except ``/login``)
  that a browser marks as sent from another site: ``Sec-Fetch-Site`` ``cross-site`` or
  ``same-site``, or an ``Origin`` that is neither the request's own nor the service's
  public URL. The session cookie is ``SameSite=Lax``, which already keeps it off most
  cross-site requests; this check holds on the server whatever the browser does.
  API routes authenticate with bearer tokens, never cookies, and clients that send neither
  header (scripts, trainers) are not browsers making requests on someone's behalf.

The policy allows scripts from the service itself and, by hash, Dash's inline scripts (its
renderer bootstrap and the clientside callbacks, ``dash.Dash.csp_hashes``); styles may be
inline because Plotly and React set them on elements. Plotly's scatter, bar and heatmap
traces draw without ``'unsafe-eval'``. The API docs pages (Swagger UI and ReDoc, served by
the service itself, ``normwatch.server.api.docs``) start with an inline bootstrap script of
FastAPI's and get a policy of their own (:data:`DOCS_PATHS`); it allows no other host either.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "DOCS_PATHS",
    "BrowserSecurity",
    "content_security_policy",
    "cross_site_reason",
    "docs_content_security_policy",
    "origin_of",
    "sent_from_elsewhere",
]

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Bearer-token routes, and the login form (guarded by its own handler).
UNCHECKED_PREFIXES = ("/api/",)
UNCHECKED_PATHS = frozenset({"/login"})
DOCS_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc"})

_DEFAULT_PORTS = {"http": 80, "https": 443}
_HSTS = b"max-age=15552000"


def content_security_policy(script_hashes: Iterable[str] = ()) -> str:
    """The dashboard's policy; ``script_hashes`` like ``'sha256-…'`` (quotes included),
    each once (two pages may share a clientside callback's script).

    >>> content_security_policy(["'sha256-abc='", "'sha256-abc='"]).split("; ")[:2]
    ["default-src 'self'", "script-src 'self' 'sha256-abc='"]
    """
    scripts = " ".join(["'self'", *dict.fromkeys(script_hashes)])
    return "; ".join(
        [
            "default-src 'self'",
            f"script-src {scripts}",
            "style-src 'self' 'unsafe-inline'",
            # A chart's PNG download: plotly.js draws its SVG into an image from a blob: URL
            # (made by the page's own script) before it paints it on a canvas.
            "img-src 'self' data: blob:",
            "connect-src 'self'",
            "font-src 'self' data:",
            "object-src 'none'",
            "base-uri 'self'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


def docs_content_security_policy() -> str:
    """The policy of the Swagger UI and ReDoc pages, whose scripts the service serves.

    Their bootstrap is an inline script that FastAPI writes from the app's settings, so
    inline scripts are allowed on these pages only; they show no text from trainers.
    ReDoc runs its search in a worker made from a ``blob:`` URL. Nothing may load from
    another host: ReDoc's footer logo (``cdn.redoc.ly``) is refused, and hidden by ReDoc.
    """
    return "; ".join(
        [
            "default-src 'self'",
            "script-src 'self' 'unsafe-inline'",
            "style-src 'self' 'unsafe-inline'",
            "img-src 'self' data:",
            "font-src 'self' data:",
            "worker-src 'self' blob:",
            "connect-src 'self'",
            "object-src 'none'",
            "base-uri 'self'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of ``url``, lower case, the default port left out.

    None when ``url`` has no http(s) scheme or no host (``Origin: null`` among others).

    >>> origin_of("HTTP://Example.com:80/path"), origin_of("https://h:8443"), origin_of("null")
    ('http://example.com', 'https://h:8443', None)
    """
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    if ":" in host:  # an IPv6 address keeps its brackets in an origin
        host = f"[{host}]"
    if port is None or port == _DEFAULT_PORTS[scheme]:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def _own_origin(scope: Scope, headers: Headers) -> str | None:
    """The origin the request was sent to: its scheme and its ``Host`` header."""
    host = headers.get("host")
    if not host:
        server = scope.get("server")
        if not server:
            return None
        host = f"{server[0]}:{server[1]}"
    scheme = scope.get("scheme", "http")
    # A WebSocket handshake's scheme is ws(s); the page that opened it was served over http(s).
    scheme = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    return origin_of(f"{scheme}://{host}")


def cross_site_reason(scope: Scope, trusted_origins: Iterable[str] = ()) -> str | None:
    """Why an HTTP request must be refused as cross-site, or None when it may go on.

    Only state-changing methods on paths outside :data:`UNCHECKED_PREFIXES` and
    :data:`UNCHECKED_PATHS` are checked. ``trusted_origins`` are origins accepted besides
    the request's own (the service's public URL behind a proxy that terminates TLS).
    """
    if scope["method"] not in STATE_CHANGING:
        return None
    path: str = scope["path"]
    if path in UNCHECKED_PATHS or path.startswith(UNCHECKED_PREFIXES):
        return None
    return sent_from_elsewhere(scope, trusted_origins)


def sent_from_elsewhere(scope: Scope, trusted_origins: Iterable[str] = ()) -> str | None:
    """Why a request (any method, a WebSocket handshake too) is one a browser marks as sent
    from another site, or None: as :func:`cross_site_reason`, whatever its method and path."""
    headers = Headers(scope=scope)
    fetch_site = headers.get("sec-fetch-site", "").lower()
    if fetch_site in ("cross-site", "same-site"):
        return f"Sec-Fetch-Site: {fetch_site}"
    origin = headers.get("origin")
    if origin is None:
        return None
    own = _own_origin(scope, headers)
    sent_from = origin_of(origin)
    if sent_from is None or (sent_from != own and sent_from not in trusted_origins):
        return f"Origin {origin!r} is not this service"
    return None


class BrowserSecurity:
    """Pure ASGI middleware: security headers on every answer, cross-site writes refused.

    ``script_hashes`` are the CSP hashes of the dashboard's inline scripts;
    ``trusted_origins`` as in :func:`cross_site_reason`.
    """

    def __init__(
        self,
        app: ASGIApp,
        script_hashes: Sequence[str] = (),
        trusted_origins: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.trusted_origins = frozenset(trusted_origins)
        common = [
            (b"x-frame-options", b"DENY"),
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"same-origin"),
            (b"cross-origin-opener-policy", b"same-origin"),
        ]
        page_policy = content_security_policy(script_hashes).encode()
        docs_policy = docs_content_security_policy().encode()
        self._headers = [(b"content-security-policy", page_policy), *common]
        self._docs_headers = [(b"content-security-policy", docs_policy), *common]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = self._docs_headers if scope["path"] in DOCS_PATHS else self._headers
        if scope.get("scheme") == "https":
            extra = [*extra, (b"strict-transport-security", _HSTS)]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers: list[tuple[bytes, bytes]] = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers.extend(item for item in extra if item[0] not in present)
                message = {**message, "headers": headers}
            await send(message)

        reason = cross_site_reason(scope, self.trusted_origins)
        if reason is not None:
            body = json.dumps({"detail": f"cross-site request refused: {reason}"}).encode()
            await send_with_headers(
                {
                    "type": "http.response.start",
                    "status": 403,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send_with_headers({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send_with_headers)
