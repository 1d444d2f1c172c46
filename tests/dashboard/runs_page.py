"""The runs list as a test in Chromium reads and drives it: its rows' names, a pick in a
filter, the address's query, a login that waits for the table."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from playwright.sync_api import Page

from normwatch.testing import ServerProcess

ROWS = "tr.run-row a.run-link"


def names(page: Page) -> list[str]:
    found: list[str] = page.locator(ROWS).all_inner_texts()
    return [n.strip() for n in found]


def rows_are(page: Page, expected: list[str]) -> None:
    """Wait until the table lists exactly ``expected``, in order."""
    try:
        page.wait_for_function(
            "([sel, want]) => JSON.stringify(Array.from(document.querySelectorAll(sel))"
            ".map(a => a.innerText.trim())) === JSON.stringify(want)",
            arg=[ROWS, expected],
            timeout=10_000,
        )
    except Exception:
        assert names(page) == expected
        raise


def query(page: Page) -> dict[str, list[str]]:
    return parse_qs(urlsplit(page.url).query)


def pick(page: Page, dropdown: str, option: str) -> None:
    page.locator(dropdown).click()
    page.get_by_role("option", name=option, exact=True).click()
    page.keyboard.press("Escape")


def login(page: Page, server: ServerProcess, token: str) -> None:
    page.goto(f"{server.url}/login?token={token}")
    page.wait_for_selector("table.runs tr.run-row")
