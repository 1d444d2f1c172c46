"""Dashboard login: a read or admin token exchanged for a session cookie (:mod:`.session`).

Login links carry the secret in the URL fragment (``/login#token=...``), which browsers
never send, so it never reaches a log; ``assets/login.js`` moves it into the form. Only a
page the user reached directly logs in by itself: from another site's link or form the
user is asked first, or refused (login CSRF would put a victim in the attacker's project).
"""

from __future__ import annotations

import html
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session, sessionmaker

from normwatch.server.auth import authenticate
from normwatch.server.config import Settings

from .session import COOKIE, SessionMiddleware, SessionSigner

# A login form holds a token and a path: anything longer is not one.
LOGIN_BODY_LIMIT = 16 * 1024
LOGIN_SCRIPT = Path(__file__).resolve().parent / "assets" / "login.js"
# Sec-Fetch-Site of a navigation the user made (typed, bookmarked, or a link of this site);
# browsers too old to send the header send nothing.
DIRECT = frozenset({"none", "same-origin", ""})


def _safe_next(target: str | None) -> str:
    """Only same-site paths: an open redirect through the login page is refused.

    A path of this site starts with one ``/``. Backslashes and control characters are
    refused too: browsers read ``/\\host`` as ``//host``, and drop tabs and newlines.
    Anything else becomes ``/``.
    """
    if not target or not target.startswith("/") or target.startswith("//"):
        return "/"
    # A single leading "/" leaves no room for a scheme or a host.
    if "\\" in target or any(ord(c) < 0x20 or ord(c) == 0x7F for c in target):
        return "/"
    return target


def _page(title: str, content: str, status: int) -> HTMLResponse:
    body = f"""<!doctype html><html><head><meta charset="utf-8"><title>normwatch · {title}</title>
<script src="/login/login.js" defer></script>
<style>body{{font-family:system-ui,sans-serif;background:#f6f7f9;display:flex;
justify-content:center;padding-top:12vh}}form,.box{{background:#fff;padding:2rem 2.5rem;
border-radius:8px;box-shadow:0 1px 4px #0002;width:26rem}}h1{{margin:0 0 1rem;font-size:1.4rem}}
input{{width:100%;padding:.5rem;font-family:monospace;box-sizing:border-box}}
button{{margin-top:1rem;padding:.5rem 1.2rem}}.error{{color:#b00020}}
.confirm{{font-weight:600}}.hint{{color:#666;font-size:.85rem}}</style></head><body>
{content}</body></html>"""
    # Not cached, not framed (a framed confirm button could be clicked through), and no
    # Referer to other sites: the address may hold a token until the script clears it.
    # ("no-referrer" would also make the browser send "Origin: null" with the form.)
    headers = {
        "Cache-Control": "no-store",
        "Referrer-Policy": "same-origin",
        "X-Frame-Options": "DENY",
    }
    return HTMLResponse(body, status_code=status, headers=headers)


def login_page(
    error: str = "", next_url: str = "/", *, token: str = "", autosubmit: bool = False
) -> HTMLResponse:
    """The login form; ``token`` prefilled asks the user to confirm, ``autosubmit`` lets the
    page's script submit a token it finds in the URL fragment."""
    message = f'<p class="error">{html.escape(error)}</p>' if error else ""
    hidden = "" if token else " hidden"
    form = f"""<form id="login-form" method="post" action="/login" \
data-autosubmit="{1 if autosubmit else 0}"><h1>normwatch</h1>{message}
<p id="confirm" class="confirm"{hidden}>Log in with the token from this link?</p>
<label for="token">API token (read or admin)</label>
<input id="token" name="token" type="password" autocomplete="off" autofocus required \
value="{html.escape(token)}">
<input type="hidden" name="next" value="{html.escape(next_url)}">
<button type="submit" id="login">Log in</button>
<p class="hint">Create one with <code>normwatch token create --project P --scope read</code>.</p>
</form>"""
    return _page("log in", form, 401 if error else 200)


def refusal_page(status: int, reason: str) -> HTMLResponse:
    content = f"""<div class="box"><h1>normwatch</h1><p class="error">{html.escape(reason)}</p>
<p><a href="/login">Log in here</a> instead.</p></div>"""
    return _page("login refused", content, status)


def is_direct(request: Request) -> bool:
    """Whether the user reached this page themselves rather than through another site."""
    return request.headers.get("sec-fetch-site", "").strip().lower() in DIRECT


def foreign_origin(request: Request, settings: Settings | None) -> str | None:
    """Why a login form is refused as sent by another site, or None if it is our own."""
    if request.headers.get("sec-fetch-site", "").strip().lower() == "cross-site":
        return "This login form was sent from another site."
    origin = request.headers.get("origin")
    if origin is None:
        return None
    own = {f"{request.url.scheme}://{request.url.netloc}".lower()}
    if settings is not None:
        public = urlsplit(settings.base_url)
        own.add(f"{public.scheme}://{public.netloc}".lower())
    if origin.strip().lower() not in own:
        return f"This login form was sent from another site ({origin[:200]})."
    return None


async def read_login_form(request: Request) -> dict[str, list[str]] | None:
    """The form's fields, or None when the body passes `LOGIN_BODY_LIMIT`: a declared
    length is checked first, so a huge body is refused without being waited for."""
    declared = request.headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) > LOGIN_BODY_LIMIT:
        return None
    size = 0
    parts: list[bytes] = []
    async for chunk in request.stream():
        size += len(chunk)
        if size > LOGIN_BODY_LIMIT:
            return None
        parts.append(chunk)
    return parse_qs(b"".join(parts).decode("utf-8", "replace"))


def install_login(app: FastAPI, signer: SessionSigner, sessions: sessionmaker[Session]) -> None:
    """Add /login and /logout, and the middleware that guards the dashboard."""
    script = LOGIN_SCRIPT.read_bytes()

    def establish(token: str, next_url: str, secure: bool) -> Response:
        token = token.strip()
        # Longer than any token: not worth a lookup.
        who = None
        if len(token) <= 256:
            with sessions() as session, session.begin():
                who = authenticate(session, token)
        if who is None:
            return login_page("That token is unknown, revoked or expired.", next_url)
        if not who.can("read"):
            return login_page(
                f"That is an '{who.scope}' token; the dashboard needs a read or admin token.",
                next_url,
            )
        response = RedirectResponse(_safe_next(next_url), status_code=303)
        response.set_cookie(
            COOKIE,
            signer.dump(who.token_id),
            max_age=signer.max_age,
            httponly=True,
            samesite="lax",
            secure=secure,
        )
        return response

    @app.get("/login", include_in_schema=False)
    def login_form(request: Request, token: str | None = None, next: str = "/") -> Response:
        next_url = _safe_next(next)
        direct = is_direct(request)
        if token and direct:
            # An old-style link (?token=), typed or bookmarked: log in, and the redirect
            # takes the secret out of the address bar.
            return establish(token, next_url, request.url.scheme == "https")
        if token:  # from another site: the user confirms (anything longer is no token)
            return login_page(next_url=next_url, token=token if len(token) <= 256 else "")
        return login_page(next_url=next_url, autosubmit=direct)

    @app.get("/login/login.js", include_in_schema=False)
    def login_script() -> Response:
        # A file of its own, not inline: pages may be served with script-src 'self'.
        return Response(script, media_type="text/javascript", headers={"Cache-Control": "no-cache"})

    @app.post("/login", include_in_schema=False)
    async def login_submit(request: Request) -> Response:
        refused = foreign_origin(request, getattr(request.app.state, "settings", None))
        if refused is not None:
            return refusal_page(403, refused)
        form = await read_login_form(request)
        if form is None:
            response = refusal_page(413, f"A login form is at most {LOGIN_BODY_LIMIT} bytes.")
            response.headers["Connection"] = "close"
            return response
        token = (form.get("token") or [""])[0]
        next_url = (form.get("next") or ["/"])[0]
        return establish(token, next_url, request.url.scheme == "https")

    # A POST (GET answers 405): a link or an image on another site cannot log anyone out,
    # and `security.BrowserSecurity` refuses the form sent from another origin.
    @app.post("/logout", include_in_schema=False)
    def logout() -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    app.add_middleware(SessionMiddleware, signer=signer, sessions=sessions)
