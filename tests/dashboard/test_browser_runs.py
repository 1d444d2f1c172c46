"""The runs list in real headless Chromium against a real server on Postgres: searched,
filtered by tag, state and config value, sorted by its columns, all kept in the URL and
reproduced by reloading it; live refreshes that keep the view and the ticks; an admin's tag
edits, read back through the API; a reader's list without them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from playwright.sync_api import Browser, Page, Request, Route

from normwatch.testing import ServerProcess
from tests.helpers.tenants import Tenant, make_tenant

from .browser_page import BrowserProblems
from .runs_page import ROWS, login, names, pick, query, rows_are

RUNS = [
    # name, tags, optimizer.lr (None: a flat "optimizer.lr" key of 1e-2), state, last step
    ("32b-LR3e-4", ["32b", "ablation"], 3e-4, "running", 500),
    ("32b-lr1e-3", ["32b", "ablation"], 1e-3, "running", 200),
    ("32b-lr6e-4", ["32b"], 6e-4, "failed", 300),
    ("7b-lr3e-4", ["7b", "ablation"], 3e-4, "finished", 900),
    ("7b-baseline", ["7b"], 3e-4, "running", None),
    ("debug", [], None, "finished", None),
]


def seed(server: ServerProcess, tenant: Tenant) -> dict[str, str]:
    """The runs of `RUNS` (name: id), each with its tags, config, state and steps."""
    ids = {}
    with httpx.Client(base_url=server.url, headers=tenant.headers("ingest"), timeout=30) as api:
        for name, tags, lr, state, last_step in RUNS:
            config: dict[str, Any] = {"model": {"qk_norm": name.startswith("32b")}}
            if lr is not None:
                config["optimizer"] = {"lr": lr, "name": "adamw"}
            else:
                config["optimizer.lr"] = 1e-2
            made = api.post("/api/v1/runs", json={"name": name, "tags": tags, "config": config})
            assert made.status_code == 200, made.text
            run_id = str(made.json()["id"])
            if last_step is not None:
                steps = list(range(0, last_step + 1, 100))
                batch = {"steps": steps, "metrics": {"grad/norm/total": [0.5] * len(steps)}}
                assert api.post(f"/api/v1/runs/{run_id}/metrics", json=batch).status_code == 202
            if state != "running":
                done = api.patch(f"/api/v1/runs/{run_id}", json={"status": state})
                assert done.status_code == 200, done.text
            ids[name] = run_id
    return ids


def run_tags(server: ServerProcess, tenant: Tenant, run_id: str) -> list[str]:
    got = httpx.get(
        f"{server.url}/api/v1/runs/{run_id}", headers=tenant.headers("read"), timeout=30
    )
    assert got.status_code == 200, got.text
    tags: list[str] = got.json()["tags"]
    return tags


CALLBACKS = "**/_dash-update-component?*"


def callback_kind(request: Request) -> str | None:
    """``"tag"`` for the tag callback's request set off by a tag's × (however it is wired:
    the button itself or the table's click store), ``"refresh"`` for the table's refresh,
    else None."""
    body = json.loads(request.post_data or "{}")
    output = body.get("output", "")
    changed = " ".join(body.get("changedPropIds", []))
    if "runs-tag-editing.data" in output and ("run-tag-remove" in changed or "runs-tag" in changed):
        return "tag"
    return "refresh" if "runs-table.children" in output else None


class HeldRequests:
    """Routes the page's callback requests: the first of each kind (`callback_kind`) is held
    in the browser until `go`, the others go on."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.held: dict[str, Route] = {}

    def __call__(self, route: Route) -> None:
        kind = callback_kind(route.request)
        if kind is not None and kind not in self.held:
            self.held[kind] = route
        else:
            route.continue_()

    def wait(self, kind: str) -> None:
        """Wait (10 s at most) until a request of ``kind`` is held."""
        for _ in range(200):
            if kind in self.held:
                return
            self.page.wait_for_timeout(50)
        raise AssertionError(f"no {kind} request was sent")

    def go(self, kind: str) -> None:
        self.held[kind].continue_()


def test_search_filter_sort_in_the_url_and_tags_edited_by_an_admin(
    page: Page, browser: Browser, pg_server: ServerProcess, artifacts: Path
) -> None:
    tenant = make_tenant(pg_server.database_url)
    ids = seed(pg_server, tenant)
    problems = BrowserProblems(page)
    login(page, pg_server, tenant.admin)
    assert sorted(names(page)) == sorted(ids)
    assert "6 runs" in page.inner_text("#runs-count")

    # Sorting by a column's title: ascending, then reversed; runs without a step come last.
    page.click("#runs-sort-name")
    rows_are(page, sorted(ids, key=str.casefold))
    page.click("#runs-sort-name")
    rows_are(page, sorted(ids, key=str.casefold, reverse=True))
    assert page.text_content("#runs-sort-name") == "name ↓"
    page.click("#runs-sort-last_step")
    rows_are(page, ["7b-lr3e-4", "32b-LR3e-4", "32b-lr6e-4", "32b-lr1e-3", "debug", "7b-baseline"])
    assert query(page) == {"sort": ["-last_step"]}

    # A search (any case), a tag, a state: each narrows the list.
    page.fill("#runs-search", "lr")
    rows_are(page, ["7b-lr3e-4", "32b-LR3e-4", "32b-lr6e-4", "32b-lr1e-3"])
    pick(page, "#runs-tag", "32b")
    rows_are(page, ["32b-LR3e-4", "32b-lr6e-4", "32b-lr1e-3"])
    pick(page, "#runs-state", "running")
    rows_are(page, ["32b-LR3e-4", "32b-lr1e-3"])

    # A malformed config filter says why beside the field and changes nothing.
    page.fill("#runs-config", "optimizer.lr>=abc")
    page.press("#runs-config", "Enter")
    page.wait_for_function(
        "() => document.querySelector('#runs-config-error').innerText.includes('not a number')"
    )
    rows_are(page, ["32b-LR3e-4", "32b-lr1e-3"])
    page.fill("#runs-config", "optimizer.lr>=5e-4")
    page.press("#runs-config", "Enter")
    rows_are(page, ["32b-lr1e-3"])
    assert page.inner_text("#runs-config-error") == ""
    page.fill("#runs-config", "optimizer.lr=3e-4, model.qk_norm=true")
    page.press("#runs-config", "Enter")
    rows_are(page, ["32b-LR3e-4"])
    assert page.inner_text("#runs-count").startswith("1 of 6 runs")

    # The URL carries the whole view; the refresh every 2 s keeps it, and a tick.
    page.wait_for_function("() => location.search.includes('config=')")
    view = {
        "q": ["lr"],
        "tag": ["32b"],
        "state": ["running"],
        "config": ["optimizer.lr=3e-4", "model.qk_norm=true"],
        "sort": ["-last_step"],
    }
    assert query(page) == view
    page.locator("tr.run-row", has_text="32b-LR3e-4").locator("input[type=checkbox]").check()
    page.wait_for_timeout(2500)
    rows_are(page, ["32b-LR3e-4"])
    assert page.locator("tr.run-row input[type=checkbox]").is_checked()
    assert page.input_value("#runs-search") == "lr"
    assert query(page) == view
    page.screenshot(path=str(artifacts / "runs-filtered.png"), full_page=True)

    # Reloading the URL reproduces the view, controls included.
    deep = page.url
    problems.collect()
    page.reload()
    page.wait_for_selector("table.runs tr.run-row")
    rows_are(page, ["32b-LR3e-4"])
    assert page.input_value("#runs-search") == "lr"
    assert page.input_value("#runs-config") == "optimizer.lr=3e-4, model.qk_norm=true"
    assert "32b" in page.inner_text("#runs-tag")
    assert "running" in page.inner_text("#runs-state")
    assert page.text_content("#runs-sort-last_step") == "last step ↓"
    assert page.url == deep

    # Clearing the search widens the list again, in the same order.
    page.fill("#runs-config", "")
    page.press("#runs-config", "Enter")
    rows_are(page, ["32b-LR3e-4", "32b-lr1e-3"])
    problems.assert_none()

    # An admin edits a run's tags: added in the editor, one removed by its ×; both persist.
    target = ids["32b-lr1e-3"]
    row = page.locator("tr.run-row", has_text="32b-lr1e-3")
    row.locator("button.tag-edit").click()
    page.wait_for_selector("#runs-tag-editor:not([hidden])")
    assert page.input_value("#runs-tag-input") == "32b, ablation"
    page.fill("#runs-tag-input", "32b, ablation, lr-sweep")
    page.click("#runs-tag-save")
    page.wait_for_selector("#runs-tag-message .ok")
    assert run_tags(pg_server, tenant, target) == ["32b", "ablation", "lr-sweep"]
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('tr.run-row'))"
        ".some(r => r.innerText.includes('lr-sweep'))"
    )
    # The × is clicked while a refresh of the table is on its way, which redraws the rows
    # before the ×'s answer comes: the answer still comes through, and says so.
    held = HeldRequests(page)
    page.route(CALLBACKS, held)
    held.wait("refresh")
    row.locator("button[title='remove tag ablation']").click()
    held.wait("tag")
    with page.expect_response(lambda r: callback_kind(r.request) == "refresh"):
        held.go("refresh")
    page.wait_for_timeout(500)  # the rows drawn anew, and whatever listens to their buttons
    held.go("tag")
    page.unroute(CALLBACKS, held)
    page.wait_for_function(
        "() => document.querySelector('#runs-tag-message').innerText.includes('Removed tag')"
    )
    assert page.inner_text("#runs-tag-message") == "Removed tag ablation from 32b-lr1e-3."
    assert run_tags(pg_server, tenant, target) == ["32b", "lr-sweep"]
    # The new tag is offered by the tag filter.
    pick(page, "#runs-tag", "lr-sweep")
    rows_are(page, ["32b-lr1e-3"])
    assert query(page)["tag"] == ["32b", "lr-sweep"]
    # A tag the service refuses (over 128 characters): the reason, and nothing stored.
    row.locator("button.tag-edit").click()
    page.wait_for_selector("#runs-tag-editor:not([hidden])")
    assert page.input_value("#runs-tag-input") == "32b, lr-sweep"
    page.fill("#runs-tag-input", "32b, " + "x" * 129)
    page.press("#runs-tag-input", "Enter")
    page.wait_for_selector("#runs-tag-message .error")
    assert "at most 128" in page.inner_text("#runs-tag-message")
    assert run_tags(pg_server, tenant, target) == ["32b", "lr-sweep"]
    page.screenshot(path=str(artifacts / "runs-tags.png"), full_page=True)
    page.click("#runs-tag-cancel")
    page.wait_for_selector("#runs-tag-editor[hidden]", state="attached")
    problems.assert_none()

    # A reader, in a browser of their own: the same link shows the same list; tags are
    # shown, with no control to change them. A malformed link shows every run.
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    reader = context.new_page()
    reader.set_default_timeout(15_000)
    reader_problems = BrowserProblems(reader)
    login(reader, pg_server, tenant.read)
    reader.goto(deep)
    reader.wait_for_selector("table.runs tr.run-row")
    rows_are(reader, ["32b-LR3e-4"])
    assert reader.locator("tr.run-row .tag").all_inner_texts() == ["32b", "ablation"]
    assert reader.locator("button.tag-edit, button.tag-remove, #runs-tag-editor").count() == 0
    reader.goto(f"{pg_server.url}/?sort=sideways&page=x&config=%3D%3D&state=&tag=&q=")
    reader.wait_for_selector("table.runs tr.run-row")
    assert sorted(names(reader)) == sorted(ids)
    reader.wait_for_timeout(500)
    assert urlsplit(reader.url).query == ""
    reader_problems.assert_none()
    context.close()


def test_a_search_by_id_and_ticks_kept_while_a_filter_hides_them(
    page: Page, pg_server: ServerProcess
) -> None:
    tenant = make_tenant(pg_server.database_url)
    ids = seed(pg_server, tenant)
    problems = BrowserProblems(page)
    login(page, pg_server, tenant.read)
    for name in ("7b-lr3e-4", "32b-LR3e-4"):
        page.locator("tr.run-row", has_text=name).locator("input[type=checkbox]").check()
    page.wait_for_selector("#compare-link")
    # Searching by the start of an id shows that run alone; both runs stay ticked.
    page.fill("#runs-search", ids["7b-baseline"][:8])
    rows_are(page, ["7b-baseline"])
    page.wait_for_timeout(2500)
    assert page.inner_text("#compare-link") == "compare 2 runs"
    page.fill("#runs-search", "")
    # Every run listed again before the sort is clicked, as a user sees it: a click while
    # the search's own answer is on its way is not what this test is about.
    page.wait_for_function(
        "([sel, n]) => document.querySelectorAll(sel).length === n", arg=[ROWS, len(ids)]
    )
    page.click("#runs-sort-name")
    rows_are(page, sorted(ids, key=str.casefold))
    boxes = page.locator("tr.run-row input[type=checkbox]")
    ticked = [names(page)[i] for i in range(boxes.count()) if boxes.nth(i).is_checked()]
    assert ticked == ["32b-LR3e-4", "7b-lr3e-4"]
    href = page.get_attribute("#compare-link", "href") or ""
    assert set(parse_qs(urlsplit(href).query)["run"]) == {ids["7b-lr3e-4"], ids["32b-LR3e-4"]}
    assert query(page) == {"sort": ["name"]}
    problems.assert_none()
