"""The API docs pages, Swagger UI at ``/docs`` and ReDoc at ``/redoc``, served offline.

FastAPI's own pages load Swagger UI and ReDoc from a CDN. These are the same pages
(`fastapi.openapi.docs`), pointed at copies of the scripts and styles that the service
serves itself under :data:`ASSETS_PATH`: they work on a machine without internet access
and load nothing from another host. The copies come from the ``fastapi-offline`` package
(Swagger UI 5, ReDoc 2), which is all it is used for.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = [
    "ASSETS_DIR",
    "ASSETS_PATH",
    "DOCS_PATH",
    "OAUTH2_REDIRECT_PATH",
    "REDOC_PATH",
    "install",
]

DOCS_PATH = "/docs"
REDOC_PATH = "/redoc"
OAUTH2_REDIRECT_PATH = "/docs/oauth2-redirect"
ASSETS_PATH = "/docs/assets"
# swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js and favicon.png.
ASSETS_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"


def install(app: FastAPI) -> None:
    """Add the docs pages and their assets to ``app``, built with ``docs_url=None`` and
    ``redoc_url=None`` (FastAPI's CDN pages off)."""
    app.mount(ASSETS_PATH, StaticFiles(directory=ASSETS_DIR), name="docs-assets")

    def root(request: Request) -> str:
        # Behind a proxy that mounts the service under a prefix, links carry the prefix.
        return str(request.scope.get("root_path", "")).rstrip("/")

    @app.get(DOCS_PATH, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        base = root(request)
        return get_swagger_ui_html(
            openapi_url=f"{base}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=f"{base}{OAUTH2_REDIRECT_PATH}",
            swagger_js_url=f"{base}{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{base}{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{base}{ASSETS_PATH}/favicon.png",
            swagger_ui_parameters=app.swagger_ui_parameters,
        )

    @app.get(OAUTH2_REDIRECT_PATH, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(REDOC_PATH, include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        base = root(request)
        return get_redoc_html(
            openapi_url=f"{base}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{base}{ASSETS_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{base}{ASSETS_PATH}/favicon.png",
            with_google_fonts=False,
        )
