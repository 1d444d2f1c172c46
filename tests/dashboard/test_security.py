"""Security headers, the Content-Security-Policy in a real browser, framing, and the
same-origin check on the dashboard's state-changing callbacks."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Page
from playwright.sync_api import Route as BrowserRoute
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from normwatch.dashboard.security import (
    BrowserSecurity,
    content_security_policy,
    cross_site_reason,
    docs_content_security_policy,
    origin_of,
    sent_from_elsewhere,
)
from normwatch.testing import ServerProcess
from tests.dashboard.browser_page import BrowserProblems
from tests.helpers.coroutines import run_async
from tests.helpers.tenants import Tenant, make_tenant

COMMON_HEADERS = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
}
EVIL = "http://evil.example"
SCRIPT = re.compile(r"<script(?P<attrs>[^>]*)>(?P<body>.*?)</script>", re.S)


# --- the pure parts ---------------------------------------------------------------------


def test_content_security_policy_names_every_directive() -> None:
    assert content_security_policy(["'sha256-AAA='", "'sha256-BBB='"]) == (
        "default-src 'self'; script-src 'self' 'sha256-AAA=' 'sha256-BBB='; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; "
        "font-src 'self' data:; object-src 'none'; base-uri 'self'; form-action 'self'; "
        "frame-ancestors 'none'"
    )
    assert "unsafe-eval" not in content_security_policy()
    # The API docs pages' scripts and styles are the service's own: no other host anywhere.
    assert docs_content_security_policy() == (
        "default-src 'self'; script-src 'self' 'unsafe-inline'; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; "
        "worker-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'self'; "
        "form-action 'self'; frame-ancestors 'none'"
    )


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("HTTP://Example.COM:80/x?y", "http://example.com"),
        ("https://example.com:443", "https://example.com"),
        ("https://example.com:8443/", "https://example.com:8443"),
        ("http://[::1]:8000", "http://[::1]:8000"),
        ("null", None),
        ("file:///etc/passwd", None),
        ("http://", None),
        ("http://host:99999", None),
    ],
)
def test_origin_of(url: str, origin: str | None) -> None:
    assert origin_of(url) == origin


def scope(method: str, path: str, **headers: str) -> dict[str, Any]:
    raw = [(k.replace("_", "-").lower().encode(), v.encode()) for k, v in headers.items()]
    return {
        "type": "http",
        "method": method,
        "path": path,
        "scheme": "http",
        "server": ("127.0.0.1", 8000),
        "headers": [(b"host", b"127.0.0.1:8000"), *raw],
    }


CALLBACK = "/_dash-update-component"


@pytest.mark.parametrize(
    ("request_scope", "reason"),
    [
        (scope("POST", CALLBACK), None),
        (scope("POST", CALLBACK, origin="http://127.0.0.1:8000"), None),
        (scope("POST", CALLBACK, sec_fetch_site="same-origin"), None),
        (scope("POST", CALLBACK, origin=EVIL), "Origin 'http://evil.example' is not this service"),
        (scope("POST", CALLBACK, origin="null"), "Origin 'null' is not this service"),
        (
            scope("POST", CALLBACK, origin="https://127.0.0.1:8000"),
            "Origin 'https://127.0.0.1:8000' is not this service",
        ),
        (scope("POST", CALLBACK, sec_fetch_site="cross-site"), "Sec-Fetch-Site: cross-site"),
        (scope("DELETE", "/rules", sec_fetch_site="same-site"), "Sec-Fetch-Site: same-site"),
        (
            scope("PUT", "/anything", origin=EVIL),
            "Origin 'http://evil.example' is not this service",
        ),
        (scope("GET", "/", origin=EVIL, sec_fetch_site="cross-site"), None),
        (scope("POST", "/api/v1/runs", origin=EVIL, sec_fetch_site="cross-site"), None),
        (scope("POST", "/login", origin=EVIL), None),
    ],
)
def test_cross_site_reason(request_scope: dict[str, Any], reason: str | None) -> None:
    assert cross_site_reason(request_scope) == reason


def test_cross_site_reason_accepts_the_public_origin() -> None:
    behind_proxy = scope("POST", CALLBACK, origin="https://normwatch.example.org")
    trusted = ["https://normwatch.example.org"]
    assert cross_site_reason(behind_proxy, trusted) is None
    assert cross_site_reason(behind_proxy) == (
        "Origin 'https://normwatch.example.org' is not this service"
    )


def test_a_websocket_handshake_is_checked_like_a_write() -> None:
    """A run page's live channel (any method, ws or wss): from its own page, or from a
    client that sends no Origin, it goes on; a page of another site is refused."""

    def handshake(scheme: str, **headers: str) -> dict[str, Any]:
        return {**scope("GET", "/runs/r/live", **headers), "type": "websocket", "scheme": scheme}

    assert sent_from_elsewhere(handshake("ws", origin="http://127.0.0.1:8000")) is None
    assert sent_from_elsewhere(handshake("wss", origin="https://127.0.0.1:8000")) is None
    assert sent_from_elsewhere(handshake("ws")) is None
    assert sent_from_elsewhere(handshake("ws", origin=EVIL)) == (
        "Origin 'http://evil.example' is not this service"
    )
    assert sent_from_elsewhere(handshake("wss", origin="http://127.0.0.1:8000")) == (
        "Origin 'http://127.0.0.1:8000' is not this service"
    )
    assert sent_from_elsewhere(handshake("ws", sec_fetch_site="cross-site")) == (
        "Sec-Fetch-Site: cross-site"
    )


# --- the middleware on a small app of its own -------------------------------------------


def tiny_app() -> BrowserSecurity:
    def framed(_request: Request) -> PlainTextResponse:
        return PlainTextResponse("own", headers={"X-Frame-Options": "SAMEORIGIN"})

    def write(_request: Request) -> JSONResponse:
        return JSONResponse({"written": True})

    app = Starlette(routes=[Route("/framed", framed), Route("/write", write, methods=["POST"])])
    return BrowserSecurity(app, script_hashes=["'sha256-AAA='"])


def asgi_call(
    base_url: str, method: str, path: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    """One request to :func:`tiny_app` through httpx's ASGI transport."""
    answers: list[httpx.Response] = []

    async def call() -> None:
        transport = httpx.ASGITransport(app=tiny_app())
        async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
            answers.append(await client.request(method, path, headers=headers))

    run_async(call())
    return answers[0]


def test_middleware_keeps_headers_the_answer_has() -> None:
    r = asgi_call("http://testserver", "GET", "/framed")
    assert r.status_code == 200 and r.text == "own"
    assert r.headers.get_list("x-frame-options") == ["SAMEORIGIN"]
    assert r.headers["content-security-policy"] == content_security_policy(["'sha256-AAA='"])
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "strict-transport-security" not in r.headers


def test_middleware_refuses_cross_site_writes_and_adds_hsts_over_https() -> None:
    refused = asgi_call("https://testserver", "POST", "/write", {"Origin": EVIL})
    same = asgi_call("https://testserver", "POST", "/write", {"Origin": "https://testserver"})
    assert refused.status_code == 403
    assert refused.json() == {
        "detail": "cross-site request refused: Origin 'http://evil.example' is not this service"
    }
    assert refused.headers["x-frame-options"] == "DENY"
    assert refused.headers["strict-transport-security"] == "max-age=15552000"
    assert same.status_code == 200 and same.json() == {"written": True}
    assert same.headers["strict-transport-security"] == "max-age=15552000"


# --- the real service -------------------------------------------------------------------


@contextmanager
def session_client(server: ServerProcess, token: str) -> Iterator[httpx.Client]:
    """A client holding a dashboard session cookie, as a browser after logging in."""
    with httpx.Client(base_url=server.url, timeout=30) as client:
        r = client.get("/login", params={"token": token})
        assert r.status_code == 303 and "normwatch_session" in client.cookies
        yield client


def inline_script_hashes(page_html: str) -> list[str]:
    """CSP hashes of the scripts a browser runs inline: not src=, not JSON, not in comments."""
    visible = re.sub(r"<!--.*?-->", "", page_html, flags=re.S)
    hashes = []
    for found in SCRIPT.finditer(visible):
        attrs = found.group("attrs")
        if "src=" in attrs or "application/json" in attrs:
            continue
        digest = hashlib.sha256(found.group("body").encode()).digest()
        hashes.append(f"'sha256-{base64.b64encode(digest).decode()}'")
    return hashes


def assert_common_headers(response: httpx.Response) -> None:
    for name, value in COMMON_HEADERS.items():
        assert response.headers.get_list(name) == [value], name
    assert "strict-transport-security" not in response.headers  # plain http


def test_headers_on_pages_dash_json_and_api(pg_server: ServerProcess) -> None:
    tenant = make_tenant(pg_server.database_url)
    with session_client(pg_server, tenant.read) as browser_like:
        index = browser_like.get("/")
        layout = browser_like.get("/_dash-layout")
    assert index.status_code == 200 and layout.status_code == 200
    hashes = inline_script_hashes(index.text)
    # The renderer's bootstrap and one script a clientside callback (the URL syncs of the
    # run and compare pages, the layer views' click handling, the charts' zoom filter, the
    # same script on two pages): each must be in the policy, once.
    assert len(set(hashes)) >= 2
    policy = content_security_policy(hashes)
    for response in (index, layout):
        assert response.headers.get_list("content-security-policy") == [policy]
        assert_common_headers(response)
    assert layout.headers["content-type"] == "application/json"

    api = httpx.get(f"{pg_server.url}/api/v1/runs", headers=tenant.headers("read"))
    unauthorized = httpx.get(f"{pg_server.url}/api/v1/runs")
    redirect = httpx.get(f"{pg_server.url}/alerts")
    health = httpx.get(f"{pg_server.url}/healthz")
    assert (api.status_code, unauthorized.status_code, redirect.status_code) == (200, 401, 303)
    assert health.status_code == 200
    for response in (api, unauthorized, redirect, health):
        assert response.headers["content-security-policy"] == policy
        assert_common_headers(response)
    # The login page sets some of these itself (a stricter Referrer-Policy): each is sent once.
    login = httpx.get(f"{pg_server.url}/login")
    assert login.status_code == 200
    for name in ("content-security-policy", *COMMON_HEADERS):
        assert len(login.headers.get_list(name)) == 1, name

    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        docs = httpx.get(f"{pg_server.url}{path}")
        assert docs.status_code == 200
        assert docs.headers["content-security-policy"] == docs_content_security_policy()
        assert_common_headers(docs)
        assert "http" not in re.sub(r"https?://127\.0\.0\.1:\d+", "", docs.text)
    asset = httpx.get(f"{pg_server.url}/docs/assets/swagger-ui-bundle.js")
    assert asset.status_code == 200 and "SwaggerUIBundle" in asset.text[:1000]


def test_cross_site_callback_refused_before_the_session(pg_server: ServerProcess) -> None:
    r = httpx.post(
        f"{pg_server.url}/_dash-update-component", content="{}", headers={"Origin": EVIL}
    )
    assert r.status_code == 403
    assert r.json() == {
        "detail": "cross-site request refused: Origin 'http://evil.example' is not this service"
    }
    assert_common_headers(r)


def route_callback(path: str) -> dict[str, Any]:
    """The page router's callback as the browser posts it on opening ``path``."""
    return {
        "output": "..page.children...viewer.children..",
        "outputs": [
            {"id": "page", "property": "children"},
            {"id": "viewer", "property": "children"},
        ],
        "inputs": [{"id": "url", "property": "pathname", "value": path}],
        "state": [{"id": "url", "property": "search", "value": ""}],
        "changedPropIds": ["url.pathname"],
    }


def test_callback_with_session_refused_cross_site_handled_same_origin(
    pg_server: ServerProcess,
) -> None:
    tenant = make_tenant(pg_server.database_url)
    body = json.dumps(route_callback("/alerts"))
    json_type = {"Content-Type": "application/json"}
    with session_client(pg_server, tenant.read) as client:
        evil = client.post(CALLBACK, content=body, headers={**json_type, "Origin": EVIL})
        same_site = client.post(
            CALLBACK,
            content=body,
            headers={**json_type, "Origin": pg_server.url, "Sec-Fetch-Site": "same-site"},
        )
        own = client.post(CALLBACK, content=body, headers={**json_type, "Origin": pg_server.url})
        bare = client.post(CALLBACK, content=body, headers=json_type)
    assert (evil.status_code, same_site.status_code) == (403, 403)
    assert same_site.json() == {"detail": "cross-site request refused: Sec-Fetch-Site: same-site"}
    for handled in (own, bare):
        assert handled.status_code == 200
        answer = handled.json()["response"]
        assert answer["viewer"]["children"] == f"project {tenant.project} · read"
        assert f"Alerts in {tenant.project}" in json.dumps(answer["page"]["children"])


# --- in the browser ---------------------------------------------------------------------

GRAPH = "#overlay .js-plotly-plot"


def seed_run(server: ServerProcess, tenant: Tenant) -> str:
    with httpx.Client(base_url=server.url, headers=tenant.headers("ingest"), timeout=30) as api:
        run = api.post("/api/v1/runs", json={"name": "csp-run", "start_step": 0}).json()
        steps = list(range(2000))
        body = {
            "steps": steps,
            "metrics": {
                "grad/norm/total": [0.3 + 0.0005 * s for s in steps],
                "params/norm/final_norm.weight": [78.0 + 0.1 * s for s in steps],
                **{f"grad/norm/layers.{i}": [1.0 + i] * len(steps) for i in range(3)},
            },
        }
        assert api.post(f"/api/v1/runs/{run['id']}/metrics", json=body).status_code == 202
        event = {"step": 1000, "kind": "config", "text": "lr warmup ends"}
        assert api.post(f"/api/v1/runs/{run['id']}/events", json=event).status_code == 201
    return str(run["id"])


def test_pages_run_under_the_policy_without_violations(
    page: Page, pg_server: ServerProcess
) -> None:
    tenant = make_tenant(pg_server.database_url)
    run_id = seed_run(pg_server, tenant)
    problems = BrowserProblems(page)

    page.goto(f"{pg_server.url}/login")
    page.wait_for_selector("#token")
    problems.collect()
    page.goto(f"{pg_server.url}/login?token={tenant.admin}")
    page.wait_for_selector("table.runs")
    assert "csp-run" in page.inner_text("table.runs")
    problems.collect()

    # The run page, zoomed by its URL: the chart draws, with the range asked for.
    page.goto(f"{pg_server.url}/runs/{run_id}?start=500&end=1500")
    page.wait_for_function(
        f"() => {{ const g = document.querySelector('{GRAPH}');"
        " return g && g.data && g.data.length === 2 && g.data[0].x.length === 1001; }"
    )
    xs = page.evaluate(f"Array.from(document.querySelector('{GRAPH}').data[0].x)")
    assert (xs[0], xs[-1]) == (500, 1500)
    assert page.evaluate(f"document.querySelector('{GRAPH}').layout.xaxis.range") == [500, 1500]
    assert page.locator("#overlay .scatterlayer path.js-line").count() == 2
    assert page.locator("#overlay .shapelayer path").count() == 1
    # Its live channel opens under the policy (connect-src 'self' takes ws: of the service).
    page.wait_for_function(
        "() => window.normwatchLive && window.normwatchLive.socket && "
        "window.normwatchLive.socket.readyState === WebSocket.OPEN"
    )
    page.wait_for_selector("#depth .barlayer .point path")
    # A heatmap draws too (plotly.js paints it on a canvas and shows it as a data: image).
    page.evaluate(
        "(() => { const div = document.createElement('div'); div.id = 'heatmap-probe';"
        " document.body.appendChild(div);"
        " return Plotly.newPlot(div, [{type: 'heatmap', z: [[1, 2], [3, 4]]}]); })()"
    )
    page.wait_for_selector("#heatmap-probe .hm image")
    href = page.evaluate("document.querySelector('#heatmap-probe .hm image').getAttribute('href')")
    assert href.startswith("data:image/png;base64,")
    problems.collect()

    page.click("a#nav-alerts")
    page.wait_for_selector("#alerts-recent :text('No alerts yet.')")
    page.click("a#nav-rules")
    page.wait_for_selector("#rule-form")
    page.fill("#rule-name", "csp-rule")
    page.fill("#rule-value", "5")
    page.click("#rule-create")
    page.wait_for_selector("#rule-message :text('Created rule csp-rule.')")
    page.wait_for_selector("tr.rule-row :text('csp-rule')")
    problems.assert_none()


def test_rule_form_works_and_its_request_replayed_cross_site_is_refused(
    page: Page, pg_server: ServerProcess
) -> None:
    tenant = make_tenant(pg_server.database_url)
    page.goto(f"{pg_server.url}/login?token={tenant.admin}&next=/rules")
    page.wait_for_selector("#rule-form")
    page.fill("#rule-name", "from-the-form")
    page.fill("#rule-value", "5")
    with page.expect_request(
        lambda r: urlsplit(r.url).path == CALLBACK and "rule-create.n_clicks" in (r.post_data or "")
    ) as sent:
        page.click("#rule-create")
    page.wait_for_selector("#rule-message :text('Created rule from-the-form.')")
    request = sent.value
    # The browser's own request is a same-origin one, and was let through.
    sent_headers = request.all_headers()
    assert sent_headers["origin"] == pg_server.url
    assert sent_headers["sec-fetch-site"] == "same-origin"

    cookie = {c["name"]: c["value"] for c in page.context.cookies()}["normwatch_session"]
    captured = json.loads(request.post_data or "")

    def replay(name: str, **headers: str) -> httpx.Response:
        body = json.loads(json.dumps(captured))
        for state in body["state"]:
            if state["id"] == "rule-name":
                state["value"] = name
        return httpx.post(
            request.url,
            content=json.dumps(body),
            headers={"Content-Type": "application/json", **headers},
            cookies={"normwatch_session": cookie},
        )

    refused = [
        replay("evil-origin", Origin=EVIL),
        replay("evil-fetch", **{"Sec-Fetch-Site": "cross-site"}),
        replay("sibling", Origin="http://127.0.0.1:1", **{"Sec-Fetch-Site": "same-site"}),
    ]
    assert [r.status_code for r in refused] == [403, 403, 403]
    own = replay("same-origin", Origin=pg_server.url, **{"Sec-Fetch-Site": "same-origin"})
    script = replay("no-origin")
    assert (own.status_code, script.status_code) == (200, 200)
    assert "Created rule same-origin." in own.text and "Created rule no-origin." in script.text

    # Bearer-token API calls are not browser sessions: an Origin header changes nothing.
    rule = {
        "name": "via-api",
        "metric": "grad/norm/total",
        "condition": {"kind": "threshold", "op": ">", "value": 9.0},
    }
    with httpx.Client(base_url=pg_server.url, headers=tenant.headers("admin")) as api:
        made = api.post("/api/v1/alert-rules", json=rule, headers={"Origin": EVIL})
        assert made.status_code == 201
        names = sorted(r["name"] for r in api.get("/api/v1/alert-rules").json())
    assert names == ["from-the-form", "no-origin", "same-origin", "via-api"]


class Framer:
    """Another local origin with a page that frames a URL of the service."""

    def __init__(self, target: str) -> None:
        page = (
            f'<!doctype html><iframe id="service" src="{target}"></iframe>'
            '<iframe id="own" src="/inner"></iframe>'
        ).encode()
        inner = b'<!doctype html><p id="inner">framed here</p>'

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = inner if self.path == "/inner" else page
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def framer(pg_server: ServerProcess) -> Iterator[Framer]:
    framing = Framer(f"{pg_server.url}/")
    yield framing
    framing.close()


def test_dashboard_cannot_be_framed(page: Page, pg_server: ServerProcess, framer: Framer) -> None:
    tenant = make_tenant(pg_server.database_url)
    page.goto(f"{pg_server.url}/login?token={tenant.read}")
    page.wait_for_selector("main .card")  # logged in: a frame would get the runs list

    refusals: list[str] = []
    page.on("console", lambda m: refusals.append(m.text) if m.type == "error" else None)
    page.goto(framer.url)
    own = page.frame_locator("#own")
    assert own.locator("#inner").inner_text() == "framed here"  # framing itself works here
    service = page.query_selector("#service")
    assert service is not None
    frame = service.content_frame()
    assert frame is not None
    assert frame.url == "chrome-error://chromewebdata/"
    assert (
        frame.query_selector("table.runs") is None
        and frame.query_selector("#react-entry-point") is None
    )
    assert any("frame-ancestors 'none'" in text for text in refusals), refusals


# --- the API docs pages, offline --------------------------------------------------------


def operations_of(server: ServerProcess) -> list[str]:
    """Each operation of the OpenAPI document, as ``METHOD path``."""
    paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
    methods = ("get", "put", "post", "delete", "patch")
    return [f"{m.upper()} {path}" for path, item in paths.items() for m in item if m in methods]


class Offline:
    """Lets the page reach only ``server``; every other request is aborted and recorded."""

    def __init__(self, page: Page, server: ServerProcess) -> None:
        self.elsewhere: list[str] = []
        self.local: list[str] = []

        def route(request_route: BrowserRoute) -> None:
            url = request_route.request.url
            if url.startswith(f"{server.url}/"):
                self.local.append(urlsplit(url).path)
                request_route.continue_()
            else:
                self.elsewhere.append(url)
                request_route.abort()

        page.route("**/*", route)


def test_swagger_ui_renders_every_operation_offline(page: Page, pg_server: ServerProcess) -> None:
    operations = operations_of(pg_server)
    assert "POST /api/v1/runs/{run_id}/metrics" in operations
    problems = BrowserProblems(page)
    offline = Offline(page, pg_server)
    page.goto(f"{pg_server.url}/docs")
    page.wait_for_selector(".opblock")
    page.wait_for_function(
        f"() => document.querySelectorAll('.opblock').length === {len(operations)}"
    )
    shown = page.evaluate(
        "Array.from(document.querySelectorAll('.opblock')).map(b =>"
        " b.querySelector('.opblock-summary-method').textContent + ' ' +"
        " b.querySelector('.opblock-summary-path').getAttribute('data-path'))"
    )
    assert sorted(shown) == sorted(operations)
    problems.assert_none()
    assert offline.elsewhere == []
    assert sorted(set(offline.local)) == [
        "/docs",
        "/docs/assets/favicon.png",
        "/docs/assets/swagger-ui-bundle.js",
        "/docs/assets/swagger-ui.css",
        "/openapi.json",
    ]


def test_redoc_renders_every_operation_offline(page: Page, pg_server: ServerProcess) -> None:
    operations = operations_of(pg_server)
    problems = BrowserProblems(page)
    offline = Offline(page, pg_server)
    page.goto(f"{pg_server.url}/redoc")
    page.wait_for_function(
        f"() => document.querySelectorAll('div[id^=\"operation/\"]').length === {len(operations)}"
    )
    assert page.locator("h1").first.inner_text().startswith("normwatch")
    # Its search runs in a worker made from a blob: URL, which the policy allows.
    page.fill("input.search-input", "healthz")
    page.wait_for_selector("[data-role='search:results'] li[data-item-id$='/healthz_healthz_get']")
    problems.collect()
    assert offline.elsewhere == []
    assert sorted(set(offline.local)) == [
        "/docs/assets/favicon.png",
        "/docs/assets/redoc.standalone.js",
        "/openapi.json",
        "/redoc",
    ]
    # ReDoc's footer shows Redocly's logo from their CDN: the policy refuses it before any
    # request is made, and ReDoc hides the image. That refusal is the only complaint.
    logo = "https://cdn.redoc.ly/redoc/logo-mini.svg"
    assert [v.split(" ")[:2] for v in problems.violations] == [["img-src", logo]]
    assert len(problems.console) == 1 and f"Loading the image '{logo}'" in problems.console[0]
