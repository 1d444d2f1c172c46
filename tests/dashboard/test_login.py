"""Dashboard login: the pages and their escaping, the redirect after logging in, fragment
links, no secret in logs, and no login from another site.

Browser tests drive real headless Chromium, whose ``Sec-Fetch-Site`` and ``Origin``
headers are what the server decides on; "another site" is a second local HTTP server,
reached as ``localhost`` (cross-site to the service on 127.0.0.1) or as 127.0.0.1 on
another port (same-site).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page
from starlette.requests import Request

from normwatch.cli import RedactTokenQuery
from normwatch.dashboard.login import (
    LOGIN_SCRIPT,
    _safe_next,
    foreign_origin,
    is_direct,
    login_page,
    refusal_page,
)
from normwatch.dashboard.session import COOKIE
from normwatch.server.config import Settings
from normwatch.testing import ServerProcess, running_server
from tests.helpers.tenants import make_tenant

CONFIRM = "Log in with the token from this link?"


def session_cookies(context: BrowserContext) -> list[str]:
    return [c["value"] for c in context.cookies() if c["name"] == COOKIE]


# The pure parts.

MARKUP = '"><script>alert(1)</script><img src=x onerror=alert(2)>'
ESCAPED = "&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;"


@pytest.mark.parametrize(
    ("target", "safe"),
    [
        ("/runs/r1?left=grad%2Fnorm%2Ftotal&start=5", "/runs/r1?left=grad%2Fnorm%2Ftotal&start=5"),
        ("/alerts", "/alerts"),
        ("/", "/"),
        ("/%2F%2Fevil.example", "/%2F%2Fevil.example"),  # a path of this site
        (None, "/"),
        ("", "/"),
        ("//evil.example/x", "/"),
        ("///evil.example", "/"),
        ("https://evil.example/", "/"),
        ("javascript:alert(1)", "/"),
        ("evil.example", "/"),
        ("runs/r1", "/"),
        ("/\\evil.example", "/"),
        ("\\\\evil.example", "/"),
        ("/\t/evil.example", "/"),
        ("/\n/evil.example", "/"),
        ("/runs\x7f", "/"),
        ("//[", "/"),
    ],
)
def test_safe_next_keeps_paths_of_this_site_only(target: str | None, safe: str) -> None:
    assert _safe_next(target) == safe


def test_login_page_escapes_what_it_shows() -> None:
    page = login_page(MARKUP, MARKUP, token=MARKUP, autosubmit=True)
    body = bytes(page.body).decode()
    assert page.status_code == 401  # with an error
    assert f'<p class="error">{ESCAPED}</p>' in body
    assert f'name="next" value="{ESCAPED}"' in body
    assert f'autofocus required value="{ESCAPED}"' in body
    assert "<script>alert" not in body and "<img" not in body
    assert 'data-autosubmit="1"' in body
    assert '<p id="confirm" class="confirm">' in body  # a token to confirm: shown
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["referrer-policy"] == "same-origin"


def test_login_page_without_an_error_or_a_token() -> None:
    page = login_page(next_url="/alerts")
    body = bytes(page.body).decode()
    assert page.status_code == 200
    assert '<p class="error">' not in body
    assert '<p id="confirm" class="confirm" hidden>' in body
    assert 'data-autosubmit="0"' in body
    assert 'name="next" value="/alerts"' in body
    assert 'autofocus required value=""' in body


def test_refusal_page_escapes_its_reason() -> None:
    page = refusal_page(403, f"This login form was sent from another site ({MARKUP}).")
    body = bytes(page.body).decode()
    assert page.status_code == 403
    assert f"sent from another site ({ESCAPED}).</p>" in body
    assert "<script>alert" not in body


def request_with(url: str = "http://127.0.0.1:8000/login", **headers: str) -> Request:
    scheme, rest = url.split("://")
    host, _, path = rest.partition("/")
    raw = [(b"host", host.encode())]
    raw += [(k.replace("_", "-").lower().encode(), v.encode()) for k, v in headers.items()]
    return Request(
        {
            "type": "http",
            "method": "POST",
            "scheme": scheme,
            "path": "/" + path,
            "query_string": b"",
            "headers": raw,
        }
    )


@pytest.mark.parametrize(
    ("site", "direct"),
    [
        (None, True),
        ("none", True),
        ("same-origin", True),
        (" Same-Origin ", True),
        ("same-site", False),
        ("cross-site", False),
    ],
)
def test_is_direct(site: str | None, direct: bool) -> None:
    request = request_with() if site is None else request_with(sec_fetch_site=site)
    assert is_direct(request) is direct


def test_foreign_origin() -> None:
    settings = Settings(public_url="https://normwatch.example.org/base")
    own = "http://127.0.0.1:8000"
    assert foreign_origin(request_with(), None) is None
    assert foreign_origin(request_with(origin=own), None) is None
    assert foreign_origin(request_with(origin=own.upper()), None) is None
    assert foreign_origin(request_with(origin="https://normwatch.example.org"), settings) is None
    assert foreign_origin(request_with(origin="https://normwatch.example.org"), None) == (
        "This login form was sent from another site (https://normwatch.example.org)."
    )
    assert foreign_origin(request_with(origin="null"), settings) == (
        "This login form was sent from another site (null)."
    )
    assert foreign_origin(request_with(sec_fetch_site="cross-site", origin=own), None) == (
        "This login form was sent from another site."
    )
    long_origin = "http://" + "e" * 300
    assert foreign_origin(request_with(origin=long_origin), None) == (
        f"This login form was sent from another site ({long_origin[:200]})."
    )


# Over plain HTTP: what the server answers to each kind of request.


def test_a_query_token_logs_in_only_on_direct_navigation(pg_server: ServerProcess) -> None:
    tenant = make_tenant(pg_server.database_url)
    url = f"{pg_server.url}/login"
    params = {"token": tenant.read, "next": "/alerts"}
    for site in (None, "none", "same-origin"):
        headers = {} if site is None else {"Sec-Fetch-Site": site}
        direct = httpx.get(url, params=params, headers=headers)
        assert direct.status_code == 303, site
        assert direct.headers["location"] == "/alerts"
        assert COOKIE in direct.cookies
    for site in ("cross-site", "same-site"):
        linked = httpx.get(url, params=params, headers={"Sec-Fetch-Site": site})
        assert linked.status_code == 200, site
        assert not linked.cookies
        assert '<p id="confirm" class="confirm">' + CONFIRM in linked.text  # not hidden
        assert f'value="{tenant.read}"' in linked.text
        assert 'data-autosubmit="0"' in linked.text
        assert linked.headers["x-frame-options"] == "DENY"
        assert linked.headers["cache-control"] == "no-store"
        assert linked.headers["referrer-policy"] == "same-origin"


def test_the_login_page_autosubmits_only_when_reached_directly(pg_server: ServerProcess) -> None:
    url = f"{pg_server.url}/login"
    for site, flag in (
        ("none", "1"),
        ("same-origin", "1"),
        ("cross-site", "0"),
        ("same-site", "0"),
    ):
        page = httpx.get(url, headers={"Sec-Fetch-Site": site})
        assert page.status_code == 200
        assert f'data-autosubmit="{flag}"' in page.text, site
        assert '<p id="confirm" class="confirm" hidden>' in page.text
        assert '<script src="/login/login.js" defer></script>' in page.text
        assert "<script>" not in page.text  # nothing inline
    script = httpx.get(f"{pg_server.url}/login/login.js")
    assert script.status_code == 200
    assert script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert script.content == LOGIN_SCRIPT.read_bytes()


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ({"Origin": "http://evil.example"}, "sent from another site (http://evil.example)"),
        ({"Origin": "null"}, "sent from another site (null)"),
        ({"Sec-Fetch-Site": "cross-site"}, "sent from another site."),
        ({"Origin": "http://127.0.0.1:1"}, "sent from another site (http://127.0.0.1:1)"),
    ],
)
def test_a_login_form_from_another_origin_is_refused(
    pg_server: ServerProcess, headers: dict[str, str], says: str
) -> None:
    tenant = make_tenant(pg_server.database_url)
    answer = httpx.post(
        f"{pg_server.url}/login", data={"token": tenant.read, "next": "/"}, headers=headers
    )
    assert answer.status_code == 403
    assert says in answer.text and "text/html" in answer.headers["content-type"]
    assert not answer.cookies


def test_a_login_form_of_our_own_origin_logs_in(pg_server: ServerProcess) -> None:
    tenant = make_tenant(pg_server.database_url)
    for headers in (
        {},
        {"Origin": pg_server.url, "Sec-Fetch-Site": "same-origin"},
        {"Origin": pg_server.url.upper()},
    ):
        answer = httpx.post(
            f"{pg_server.url}/login",
            data={"token": tenant.read, "next": "/alerts"},
            headers=headers,
        )
        assert answer.status_code == 303, headers
        assert answer.headers["location"] == "/alerts" and COOKIE in answer.cookies


def test_login_bodies_are_bounded(pg_server: ServerProcess) -> None:
    tenant = make_tenant(pg_server.database_url)
    url = f"{pg_server.url}/login"
    fits = f"token={tenant.read}&next=/&pad=".encode()
    fits += b"x" * (16 * 1024 - len(fits))
    assert httpx.post(url, content=fits).status_code == 303

    def streamed() -> Iterator[bytes]:  # no Content-Length: chunked
        yield b"token=" + tenant.read.encode() + b"&pad="
        for _ in range(17):
            yield b"x" * 1024

    too_long = httpx.post(url, content=streamed())
    assert too_long.status_code == 413 and "at most 16384 bytes" in too_long.text
    assert not too_long.cookies

    parts = urlsplit(pg_server.url)
    assert parts.hostname is not None and parts.port is not None
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as conn:
        started = time.monotonic()
        conn.sendall(
            b"POST /login HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: 16385\r\n\r\ntoken="
        )
        answer = conn.recv(4096)
        took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    assert took < 2.0


def test_the_access_log_never_holds_a_token(pg_url: str, tmp_path: Path) -> None:
    tenant = make_tenant(pg_url)
    with running_server(pg_url, tmp_path, NORMWATCH_LOG_LEVEL="info") as server:
        direct = httpx.get(f"{server.url}/login", params={"next": "/", "token": tenant.read})
        assert direct.status_code == 303
        bogus = httpx.get(f"{server.url}/login?token=nw_bogus-secret&next=/")
        assert bogus.status_code == 401
        time.sleep(0.3)
        log = server.log()
    assert tenant.read not in log and "nw_bogus-secret" not in log
    assert '"GET /login?next=%2F&token=*** HTTP/1.1" 303' in log
    assert '"GET /login?token=***&next=/ HTTP/1.1" 401' in log


def test_the_redaction_filter_keeps_the_rest_of_the_line() -> None:
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", "/login?Token=nw_a&x=1&token=nw_b#f&mytoken=keep", "1.1", 303),
        None,
    )
    assert RedactTokenQuery().filter(record)
    assert record.getMessage() == (
        '127.0.0.1:5 - "GET /login?Token=***&x=1&token=***#f&mytoken=keep HTTP/1.1" 303'
    )


# In the browser.


class OtherSite:
    """A second web server: the pages of "another site" linking to the service."""

    def __init__(self, host: str) -> None:
        self.pages: dict[str, str] = {}
        pages = self.pages

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pages.get(self.path, "not found").encode()
                self.send_response(200 if self.path in pages else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(params=["localhost", "127.0.0.1"], ids=["cross-site", "same-site"])
def other_site(request: pytest.FixtureRequest) -> Iterator[OtherSite]:
    site = OtherSite(request.param)
    yield site
    site.close()


def test_a_fragment_link_logs_in_and_leaves_no_token_in_the_address(
    page: Page, pg_server: ServerProcess
) -> None:
    tenant = make_tenant(pg_server.database_url)
    page.goto(f"{pg_server.url}/login#token={tenant.read}")
    page.wait_for_selector("main .card h1")
    assert page.inner_text("main .card h1") == f"Runs in {tenant.project}"
    assert page.url == f"{pg_server.url}/"
    assert len(session_cookies(page.context)) == 1
    page.context.clear_cookies()
    page.goto(f"{pg_server.url}/login?next=/alerts#token={tenant.admin}")
    page.wait_for_url(f"{pg_server.url}/alerts")
    assert tenant.admin not in page.url and len(session_cookies(page.context)) == 1
    page.go_back()  # no page of the history holds the token
    assert tenant.admin not in page.url


def test_a_link_from_another_site_asks_before_logging_in(
    page: Page, pg_server: ServerProcess, other_site: OtherSite
) -> None:
    tenant = make_tenant(pg_server.database_url)
    login = f"{pg_server.url}/login"
    other_site.pages["/"] = (
        f'<a id="fragment" href="{login}#token={tenant.read}">see my runs</a> '
        f'<a id="query" href="{login}?token={tenant.read}&amp;next=/alerts">or these</a>'
    )
    for link, landed, next_url in (
        ("#fragment", login, "/"),
        ("#query", f"{login}?next=%2Falerts", "/alerts"),
    ):
        page.goto(f"{other_site.url}/")
        page.click(link)
        page.wait_for_selector("#confirm", state="visible")
        assert page.inner_text("#confirm") == CONFIRM
        page.wait_for_url(landed)  # the script takes the token out of the address
        assert page.input_value("#token") == tenant.read
        assert page.get_attribute("#login-form", "data-autosubmit") == "0"
        page.wait_for_timeout(300)  # nothing submits by itself
        assert page.url.startswith(login) and session_cookies(page.context) == []
        assert page.input_value("input[name=next]") == next_url
    # The user may still choose to: a click on the page itself logs in.
    page.click("#login")
    page.wait_for_url(f"{pg_server.url}/alerts")
    assert len(session_cookies(page.context)) == 1


def test_a_login_form_posted_from_another_site_is_refused(
    page: Page, pg_server: ServerProcess, other_site: OtherSite
) -> None:
    tenant = make_tenant(pg_server.database_url)
    other_site.pages["/"] = (
        f'<form method="post" action="{pg_server.url}/login">'
        f'<input type="hidden" name="token" value="{tenant.read}">'
        '<input type="hidden" name="next" value="/"><button id="go">win a prize</button></form>'
    )
    page.goto(f"{other_site.url}/")
    with page.expect_response(f"{pg_server.url}/login") as answer:
        page.click("#go")
    assert answer.value.status == 403
    assert answer.value.request.method == "POST"
    page.wait_for_selector(".error")
    assert "This login form was sent from another site" in page.inner_text(".error")
    assert session_cookies(page.context) == []


def test_logging_out_is_a_post_of_this_site(pg_server: ServerProcess) -> None:
    tenant = make_tenant(pg_server.database_url)
    with httpx.Client(base_url=pg_server.url) as browser:
        assert browser.get("/login", params={"token": tenant.read}).status_code == 303
        assert browser.get("/logout").status_code == 405  # a link or an image logs no one out
        assert browser.get("/").status_code == 200
        foreign = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
        refused = browser.post("/logout", headers=foreign)
        assert refused.status_code == 403 and browser.get("/").status_code == 200
        out = browser.post("/logout", headers={"Origin": pg_server.url})
        assert out.status_code == 303 and out.headers["location"] == "/login"
        assert COOKIE not in browser.cookies
        assert browser.get("/").status_code == 303  # back to the login page


def test_the_log_out_button_logs_out_and_another_site_cannot(
    page: Page, pg_server: ServerProcess, other_site: OtherSite
) -> None:
    tenant = make_tenant(pg_server.database_url)
    logout = f"{pg_server.url}/logout"
    other_site.pages["/"] = (
        f'<img src="{logout}"><form method="post" action="{logout}">'
        '<button id="go">win a prize</button></form>'
    )
    page.goto(f"{pg_server.url}/login#token={tenant.read}")
    page.wait_for_selector("main .card h1")
    page.goto(f"{other_site.url}/")
    with page.expect_response(logout) as answer:
        page.click("#go")
    assert (answer.value.request.method, answer.value.status) == ("POST", 403)
    page.goto(f"{pg_server.url}/")  # still logged in
    page.wait_for_selector("main .card h1")
    assert len(session_cookies(page.context)) == 1
    page.click("#logout")
    page.wait_for_url(f"{pg_server.url}/login")
    assert session_cookies(page.context) == []
    page.goto(f"{pg_server.url}/")
    page.wait_for_url(f"{pg_server.url}/login*")
