"""The runs table's chosen columns, groups and notes in real headless Chromium against a
real server on Postgres: a metric's smallest and last values and a config value in columns
of their own, runs folded by a config key with each group's mean and range, an admin's
note read back through the API, and the URL that reproduces all of it, for a reader too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Browser, Page

from normwatch.testing import ServerProcess
from tests.helpers.tenants import Tenant, make_tenant

from .browser_page import BrowserProblems
from .runs_page import login, pick, query, rows_are

RUNS: list[tuple[str, dict[str, Any], list[Any]]] = [
    # name, config, loss at steps 0, 1, 2 (none: the run logged nothing)
    ("a-lr1e-3-s1", {"lr": 1e-3, "seed": 1}, [3.0, 2.0, 2.5]),
    ("a-lr1e-3-s2", {"lr": 1e-3, "seed": 2}, [4.0, 1.5, 1.75]),
    ("b-lr3e-4-s1", {"lr": 3e-4, "seed": 1}, [5.0, 0.25, "NaN"]),
    ("c-lr1e-2-s1", {"lr": 1e-2, "seed": 1}, []),
]
NAMES = [name for name, _, _ in RUNS]
CELLS = (
    "() => Array.from(document.querySelectorAll('#runs-table tr'))"
    ".map(r => Array.from(r.querySelectorAll('td.chosen-cell')).map(c => c.innerText.trim()))"
)


def seed(server: ServerProcess, tenant: Tenant) -> dict[str, str]:
    ids = {}
    with httpx.Client(base_url=server.url, headers=tenant.headers("ingest"), timeout=30) as api:
        for name, config, loss in RUNS:
            made = api.post("/api/v1/runs", json={"name": name, "config": config})
            assert made.status_code == 200, made.text
            ids[name] = str(made.json()["id"])
            if loss:
                batch = {"steps": list(range(len(loss))), "metrics": {"loss": loss}}
                sent = api.post(f"/api/v1/runs/{ids[name]}/metrics", json=batch)
                assert sent.status_code == 202, sent.text
    return ids


def cells_are(page: Page, expected: list[list[str]]) -> None:
    """Wait until the table's rows show exactly ``expected`` in their chosen columns."""
    try:
        page.wait_for_function(
            f"want => JSON.stringify(({CELLS})()) === JSON.stringify(want)",
            arg=expected,
            timeout=10_000,
        )
    except Exception:
        assert page.evaluate(CELLS) == expected
        raise


def groups_are(page: Page, expected: list[str]) -> None:
    """Wait until the group rows read ``expected`` ("lr = 0.001 · 2 runs")."""
    script = (
        "want => JSON.stringify(Array.from(document.querySelectorAll('tr.group-row')).map(r => "
        "r.querySelector('.group-label').innerText + ' · ' + "
        "r.querySelector('.group-count').innerText)) === JSON.stringify(want)"
    )
    page.wait_for_function(script, arg=expected, timeout=10_000)


def note_of(server: ServerProcess, tenant: Tenant, run_id: str) -> str | None:
    got = httpx.get(
        f"{server.url}/api/v1/runs/{run_id}", headers=tenant.headers("read"), timeout=30
    )
    assert got.status_code == 200, got.text
    note: str | None = got.json()["notes"]
    return note


def test_columns_groups_and_notes_in_the_url(
    page: Page, browser: Browser, pg_server: ServerProcess, artifacts: Path
) -> None:
    tenant = make_tenant(pg_server.database_url)
    ids = seed(pg_server, tenant)
    problems = BrowserProblems(page)
    login(page, pg_server, tenant.admin)
    page.click("#runs-sort-name")
    rows_are(page, NAMES)

    # Columns: the loss's smallest and last values over each run, and the config's lr.
    pick(page, "#runs-col-metric", "loss")
    pick(page, "#runs-col-stat", "min")
    page.click("#runs-col-add-metric")
    cells_are(page, [["2"], ["1.5"], ["0.25"], ["—"]])
    pick(page, "#runs-col-stat", "last")
    page.click("#runs-col-add-metric")
    pick(page, "#runs-col-config", "lr")
    page.click("#runs-col-add-config")
    cells_are(
        page,
        [
            ["2", "2.5", "0.001"],
            ["1.5", "1.75", "0.001"],
            ["0.25", "NaN", "0.0003"],
            ["—", "—", "0.01"],
        ],
    )
    assert page.locator("#runs-head th.chosen-col").all_text_contents() == [
        "loss (min)×",
        "loss (last)×",
        "lr×",
    ]
    # A metric column's title sorts by it: smallest first, a run without a value last.
    page.click("#runs-head th.chosen-col >> nth=0 >> button.sort-header")
    rows_are(page, ["b-lr3e-4-s1", "a-lr1e-3-s2", "a-lr1e-3-s1", "c-lr1e-2-s1"])
    assert query(page)["sort"] == ["min:loss"]
    page.click("#runs-sort-name")
    rows_are(page, NAMES)

    # An admin's note: written in the editor, stored, shown in the run's row.
    row = page.locator("tr.run-row", has_text="a-lr1e-3-s1")
    row.locator("button.note-edit").click()
    page.wait_for_selector("#runs-note-editor:not([hidden])")
    page.fill("#runs-note-input", "diverged at step 4k; rerun with warmup")
    page.click("#runs-note-save")
    page.wait_for_selector("#runs-note-message .ok")
    assert (
        note_of(pg_server, tenant, ids["a-lr1e-3-s1"]) == "diverged at step 4k; rerun with warmup"
    )
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('tr.run-row .run-note'))"
        ".some(n => n.innerText === 'diverged at step 4k; rerun with warmup')"
    )

    # Grouped by lr: one row a value, numbers ascending, the metric columns' mean (range).
    pick(page, "#runs-group", "lr")
    groups_are(page, ["lr = 0.0003 · 1 run", "lr = 0.001 · 2 runs", "lr = 0.01 · 1 run"])
    cells_are(
        page,
        [
            ["0.25", "NaN", "0.0003"],
            ["1.75 (1.5–2)", "2.125 (1.75–2.5)", "0.001"],
            ["—", "—", "0.01"],
        ],
    )
    assert page.locator("tr.run-row").count() == 0
    href = page.locator("tr.group-row", has_text="lr = 0.001").locator("a.group-compare")
    assert href.inner_text() == "compare 2"
    assert href.get_attribute("href") == (
        f"/compare?run={ids['a-lr1e-3-s1']}&run={ids['a-lr1e-3-s2']}&metric=loss&group=mean"
    )
    page.locator("tr.group-row", has_text="lr = 0.001").locator("button.group-toggle").click()
    rows_are(page, ["a-lr1e-3-s1", "a-lr1e-3-s2"])
    view = {
        "sort": ["name"],
        "col": ["min:loss", "last:loss", "config:lr"],
        "group": ["lr"],
        "open": ["0.001"],
    }
    page.wait_for_function("() => location.search.includes('open=')")
    assert query(page) == view
    page.screenshot(path=str(artifacts / "runs-grouped.png"), full_page=True)

    # The address reproduces the table: columns, groups, the open group, the note.
    deep = page.url
    problems.collect()
    page.reload()
    page.wait_for_selector("tr.group-row")
    groups_are(page, ["lr = 0.0003 · 1 run", "lr = 0.001 · 2 runs", "lr = 0.01 · 1 run"])
    rows_are(page, ["a-lr1e-3-s1", "a-lr1e-3-s2"])
    expanded = [
        ["0.25", "NaN", "0.0003"],
        ["1.75 (1.5–2)", "2.125 (1.75–2.5)", "0.001"],
        ["2", "2.5", "0.001"],
        ["1.5", "1.75", "0.001"],
        ["—", "—", "0.01"],
    ]
    cells_are(page, expanded)
    assert page.locator("tr.run-row .run-note").all_inner_texts() == [
        "diverged at step 4k; rerun with warmup",
        "",
    ]
    assert query(page) == view
    problems.assert_none()

    # A reader sees the same table and the note, with no way to edit it.
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    reader = context.new_page()
    reader.set_default_timeout(15_000)
    reader_problems = BrowserProblems(reader)
    login_reader = f"{pg_server.url}/login?token={tenant.read}"
    reader.goto(login_reader)
    reader.wait_for_selector("table.runs")
    reader.goto(deep)
    reader.wait_for_selector("tr.group-row")
    cells_are(reader, expanded)
    assert reader.locator("tr.run-row .run-note").all_inner_texts()[0] == (
        "diverged at step 4k; rerun with warmup"
    )
    assert reader.locator("button.note-edit, #runs-note-editor").count() == 0
    reader_problems.assert_none()
    context.close()
