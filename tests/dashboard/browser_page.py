"""Driving the dashboard in headless Chromium: logging in, reading a chart's figure, and
what the browser reported (console errors, security-policy violations)."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page

from normwatch.testing import ServerProcess

GRAPH = "#overlay .js-plotly-plot"


VIOLATIONS_INIT = """
window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', e => {
  window.__cspViolations.push(
    e.violatedDirective + ' ' + e.blockedURI + ' ' + e.sourceFile + ':' + e.lineNumber);
});
"""


FIGURE_JS = f"""() => {{
  const gd = document.querySelector('{GRAPH}');
  if (!gd || !gd.data) return null;
  return {{data: gd.data.map(t => ({{name: t.name, yaxis: t.yaxis || 'y',
            color: t.line && t.line.color, x: Array.from(t.x || [])}})),
          layout: {{shapes: gd.layout.shapes || [], annotations: gd.layout.annotations || [],
                    xrange: gd.layout.xaxis.range, y2: gd.layout.yaxis2 || null}}}};
}}"""


def figure(page: Page) -> dict[str, Any]:
    page.wait_for_function(
        f"() => {{ const f = ({FIGURE_JS})(); return f && f.data.length >= 2; }}"
    )
    result: dict[str, Any] = page.evaluate(f"({FIGURE_JS})()")
    return result


def login(page: Page, server: ServerProcess, token: str) -> None:
    page.goto(f"{server.url}/login?token={token}")
    page.wait_for_selector("table.runs")


class BrowserProblems:
    """Console errors, uncaught page errors and CSP violations seen on a page."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.console: list[str] = []
        self.violations: list[str] = []
        page.add_init_script(VIOLATIONS_INIT)
        page.on(
            "console",
            lambda m: self.console.append(m.text) if m.type in ("error", "warning") else None,
        )
        page.on("pageerror", lambda e: self.console.append(f"page error: {e} {e.stack}"))

    def collect(self) -> None:
        """Read this document's violations (call before leaving it)."""
        self.violations += self.page.evaluate("window.__cspViolations")

    def assert_none(self) -> None:
        self.collect()
        assert self.violations == []
        assert self.console == [], self.console
