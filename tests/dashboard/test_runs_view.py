"""The runs list's view (search, filters, sort, page) and its URL: config conditions
(`config_filter`) read and evaluated, runs matched and sorted against a reference written
out here, and malformed parameters left out, never an error."""

from __future__ import annotations

import doctest
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from normwatch.dashboard import config_filter
from normwatch.dashboard.config_filter import (
    ConfigCondition,
    ConfigFilterError,
    config_value,
    parse_condition,
    parse_conditions,
)
from normwatch.dashboard.pages import runs_view
from normwatch.dashboard.pages.runs_view import (
    DEFAULT_SORT,
    PAGE_SIZE,
    SORTS,
    RunsView,
    sort_runs,
    toggled_sort,
)
from normwatch.dashboard.routing import query_of
from normwatch.server.schemas import RunOut

T0 = datetime(2025, 6, 1, tzinfo=UTC)


def run_out(run_id: str, name: str = "", **fields: Any) -> RunOut:
    defaults: dict[str, Any] = {
        "id": run_id,
        "project": "marin",
        "name": name or run_id,
        "status": "running",
        "segment": 1,
        "config": {},
        "tags": [],
        "last_step": None,
        "last_seen": T0,
        "created_at": T0,
    }
    return RunOut.model_validate({**defaults, **fields})


def test_doctests() -> None:
    for module in (runs_view, config_filter):
        failed, tried = doctest.testmod(module)
        assert (failed, tried > 2) == (0, True), module


# --- config conditions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "op", "value"),
    [
        ("optimizer.lr>=3e-4", "optimizer.lr", ">=", "3e-4"),
        (" optimizer.lr  >=  3e-4 ", "optimizer.lr", ">=", "3e-4"),
        ("lr==0.001", "lr", "=", "0.001"),
        ("lr=0.001", "lr", "=", "0.001"),
        ("name!=adamw", "name", "!=", "adamw"),
        ("steps<10", "steps", "<", "10"),
        ("steps<=10", "steps", "<=", "10"),
        ("steps>-1", "steps", ">", "-1"),
        ("model.qk_norm=true", "model.qk_norm", "=", "true"),
        ('note="a, b"', "note", "=", '"a, b"'),
        ("my key=x=y", "my key", "=", "x=y"),
    ],
)
def test_parse_condition(text: str, key: str, op: str, value: str) -> None:
    assert parse_condition(text) == ConfigCondition(key, op, value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("lr", "write a key, an operator (= != < <= > >=) and a value"),
        ("=3", "write a key, an operator"),
        ("  ", "write a key, an operator"),
        ("lr=", 'write a value ("" for empty text) after ='),
        ("lr>=", "write a number after >="),
        ("lr>=abc", ">= compares numbers; abc is not a number"),
        ("lr<nan", "< compares numbers; nan is not a number"),
        ("lr>inf", "> compares numbers; inf is not a number"),
        ('note="a', 'a quoted value is "text in double quotes"'),
        ("k=" + "x" * 600, "at most 512 characters"),
    ],
)
def test_parse_condition_says_why_not(text: str, says: str) -> None:
    with pytest.raises(ConfigFilterError) as raised:
        parse_condition(text)
    assert says in str(raised.value)


def test_parse_conditions_splits_at_commas_outside_quotes() -> None:
    parsed = parse_conditions('a=1, note="x, \\"y\\"" ,, b>2, a=1')
    assert [c.text for c in parsed] == ["a=1", 'note="x, \\"y\\""', "b>2"]
    assert parse_conditions("") == () == parse_conditions(" , ")
    with pytest.raises(ConfigFilterError, match="not closed"):
        parse_conditions('a="x, b=2')
    with pytest.raises(ConfigFilterError, match="'b>x': > compares numbers"):
        parse_conditions("a=1, b>x")
    with pytest.raises(ConfigFilterError, match="at most 64 conditions"):
        parse_conditions(", ".join(f"k{i}=1" for i in range(65)))


CONFIG = {
    "optimizer": {"lr": 3e-4, "name": "adamw", "betas": [0.9, 0.95]},
    "optimizer.warmup": 2000,  # a flattened key beside a nested object of the same head
    "model": {"qk_norm": True, "layers": 48, "norm": None, "name": "32b"},
    "seed": 7,
    "note": "a, b",
    "count": "12",
}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("optimizer.lr", 3e-4),
        ("optimizer.warmup", 2000),
        ("optimizer.betas.1", 0.95),
        ("optimizer.betas", [0.9, 0.95]),
        ("model.norm", None),
        ("seed", 7),
    ],
)
def test_config_value(key: str, value: Any) -> None:
    assert config_value(CONFIG, key) == value


@pytest.mark.parametrize(
    "key", ["optimizer.momentum", "optimizer.betas.2", "optimizer.betas.x", "seed.x", "x.y", ""]
)
def test_config_value_missing(key: str) -> None:
    assert config_value(CONFIG, key) is config_value({}, "anything")


# Which conditions hold on `CONFIG`, written out by hand.
HOLDS = {
    "optimizer.lr=3e-4": True,
    "optimizer.lr=0.0003": True,
    "optimizer.lr==3E-4": True,
    "optimizer.lr=3e-3": False,
    "optimizer.lr!=3e-3": True,
    "optimizer.lr>=3e-4": True,
    "optimizer.lr>3e-4": False,
    "optimizer.lr<1e-3": True,
    "optimizer.lr<=1e-4": False,
    "optimizer.warmup>1000": True,
    "optimizer.name=adamw": True,
    "optimizer.name=AdamW": False,
    'optimizer.name="adamw"': True,
    "optimizer.name>1": False,  # text is no number
    "optimizer.betas=[0.9, 0.95]": True,
    "optimizer.betas.0=0.9": True,
    "model.qk_norm=true": True,
    "model.qk_norm=True": True,
    "model.qk_norm=1": False,  # a boolean is no number
    "model.qk_norm>0": False,
    "model.layers=48": True,
    "model.layers=48.0": True,
    "model.layers>=48": True,
    "model.norm=null": True,
    "model.norm!=null": False,
    "model.name=32b": True,
    "seed!=7": False,
    "note=a, b": False,  # unquoted, the comma would split it; as one condition: text "a, b"
    'note="a, b"': True,
    "count=12": True,  # the text "12"
    "count>10": False,  # but no number
    "missing=1": False,
    "missing!=1": True,
    "missing>0": False,
    "missing<0": False,
}


@pytest.mark.parametrize(("text", "holds"), HOLDS.items())
def test_condition_holds(text: str, holds: bool) -> None:
    if text == "note=a, b":
        assert parse_condition(text).holds(CONFIG) is True
        return
    assert parse_condition(text).holds(CONFIG) is holds


# --- matching, sorting, paging ---------------------------------------------------------------


RUNS = [
    run_out(
        "a1b2c3d4e5",
        "32b-LR3e-4",
        tags=["32b", "ablation"],
        config={"optimizer": {"lr": 3e-4}},
        last_step=500,
    ),
    run_out("f0e1d2", "32b-lr1e-3", tags=["32b"], config={"optimizer": {"lr": 1e-3}}),
    run_out("0a0b0c", "7b-lr3e-4", tags=["7b", "ablation"], status="finished", last_step=9),
    run_out("ffff00", "debug", config={"optimizer.lr": 1e-2}, status="failed", last_step=0),
]


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("", ["32b-LR3e-4", "32b-lr1e-3", "7b-lr3e-4", "debug"]),
        ("?q=lr", ["32b-LR3e-4", "32b-lr1e-3", "7b-lr3e-4"]),
        ("?q=LR3E", ["32b-LR3e-4", "7b-lr3e-4"]),
        ("?q=a1b2", ["32b-LR3e-4"]),  # the start of an id
        ("?q=A1B2C3", ["32b-LR3e-4"]),
        ("?q=b2c3", []),  # inside an id: no
        ("?q=0a0", []),  # under 4 characters: names only
        ("?tag=ablation", ["32b-LR3e-4", "7b-lr3e-4"]),
        ("?tag=ablation&tag=32b", ["32b-LR3e-4"]),  # every tag named
        ("?tag=nothing", []),
        ("?state=finished&state=failed", ["7b-lr3e-4", "debug"]),  # any state named
        ("?config=optimizer.lr%3E%3D5e-4", ["32b-lr1e-3", "debug"]),
        ("?config=optimizer.lr%3D3e-4&q=32b", ["32b-LR3e-4"]),
        ("?config=optimizer.lr%3C1e-3&config=optimizer.lr%3E1e-4", ["32b-LR3e-4"]),
        ("?q=lr&tag=32b&state=running&config=optimizer.lr%3E1e-4", ["32b-LR3e-4", "32b-lr1e-3"]),
    ],
)
def test_matches(query: str, names: list[str]) -> None:
    view = RunsView.from_query(query_of(query))
    assert [r.name for r in RUNS if view.matches(r)] == names


def random_runs(count: int, seed: int) -> list[RunOut]:
    rng = random.Random(seed)
    return [
        run_out(
            f"{i:04x}{rng.randrange(16**6):06x}",
            rng.choice(["alpha", "Beta", "beta", "gamma", "Delta", "ALPHA"]) + f"-{i % 3}",
            status=rng.choice(["running", "finished", "failed"]),
            last_step=rng.choice([None, 0, 10, 500, 10**12]),
            last_seen=T0 + timedelta(seconds=rng.randrange(5)),
            created_at=T0 + timedelta(seconds=rng.randrange(5)),
        )
        for i in range(count)
    ]


def reference_sort(runs: list[RunOut], sort: str) -> list[RunOut]:
    """Independent of `sort_runs`: a pairwise comparison, insertion-sorted."""
    column, descending = sort.lstrip("-"), sort.startswith("-")

    def before(a: RunOut, b: RunOut) -> bool:
        """Whether ``a`` is listed before ``b``."""
        if column == "last_step" and (a.last_step is None) != (b.last_step is None):
            return b.last_step is None
        values = {
            "name": lambda r: (r.name.lower(), r.name),
            "status": lambda r: r.status,
            "last_step": lambda r: r.last_step or 0,
            "last_seen": lambda r: r.last_seen,
            "created": lambda r: r.created_at,
        }[column]
        x, y = values(a), values(b)
        if x != y:
            return bool(x > y) if descending else bool(x < y)
        return (a.created_at, a.id) > (b.created_at, b.id)  # ties: newest first

    ordered: list[RunOut] = []
    for run in runs:
        at = next((i for i, other in enumerate(ordered) if before(run, other)), len(ordered))
        ordered.insert(at, run)
    return ordered


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("sort", [*SORTS, *(f"-{c}" for c in SORTS)])
def test_sort_runs_against_a_reference(sort: str, seed: int) -> None:
    runs = random_runs(60, seed)
    expected = [r.id for r in reference_sort(runs, sort)]
    assert [r.id for r in sort_runs(runs, sort)] == expected
    assert [r.id for r in sort_runs(list(reversed(runs)), sort)] == expected  # stable


def test_sort_runs_puts_runs_without_a_step_last_either_way() -> None:
    runs = [run_out("a", last_step=5), run_out("b"), run_out("c", last_step=0)]
    assert [r.id for r in sort_runs(runs, "last_step")] == ["c", "a", "b"]
    assert [r.id for r in sort_runs(runs, "-last_step")] == ["a", "c", "b"]


@pytest.mark.parametrize(
    ("current", "column", "after"),
    [
        ("-last_seen", "name", "name"),
        ("name", "name", "-name"),
        ("-name", "name", "name"),
        ("name", "last_step", "-last_step"),
        ("-last_step", "last_step", "last_step"),
        ("name", "created", "-created"),
        ("name", "status", "status"),
    ],
)
def test_toggled_sort(current: str, column: str, after: str) -> None:
    assert toggled_sort(current, column) == after


def test_select_pages_the_sorted_matches() -> None:
    count = 2 * PAGE_SIZE + 7
    runs = [run_out(f"r{i:03d}", f"run {i:03d}") for i in range(count)]
    view = RunsView(sort="name", page=3)
    listing = view.select(runs)
    assert [r.name for r in listing.rows] == [f"run {i:03d}" for i in range(2 * PAGE_SIZE, count)]
    assert (listing.matched, listing.total, listing.page, listing.pages) == (count, count, 3, 3)
    past = RunsView(sort="name", page=40).select(runs)  # past the last page: the last one
    assert (past.page, [r.name for r in past.rows]) == (3, [r.name for r in listing.rows])
    few = RunsView(search="run 00").select(runs)
    assert (few.matched, few.total, few.pages, len(few.rows)) == (10, count, 1, 10)
    assert RunsView().select([]).pages == 1


# --- the URL and the store ----------------------------------------------------------------


def test_the_url_in_the_brief() -> None:
    query = query_of(
        "?q=lr&tag=32b&tag=ablation&state=running&config=optimizer.lr%3D3e-4&sort=-last_step"
    )
    view = RunsView.from_query(query)
    assert view == RunsView(
        search="lr",
        tags=("32b", "ablation"),
        states=("running",),
        config=(ConfigCondition("optimizer.lr", "=", "3e-4"),),
        sort="-last_step",
    )
    assert view.to_url() == (
        "?q=lr&tag=32b&tag=ablation&state=running&config=optimizer.lr%3D3e-4&sort=-last_step"
    )


@pytest.mark.parametrize(
    "view",
    [
        RunsView(),
        RunsView(search="a & b=c?#"),
        RunsView(tags=("a,b", "ü ñ", "x&y")),
        RunsView(states=("failed",), sort="name", page=4),
        RunsView(config=parse_conditions('a.b>=1e-4, note="x, y", c!=d')),
        RunsView(sort=DEFAULT_SORT, page=1),
    ],
)
def test_the_url_and_the_store_reproduce_the_view(view: RunsView) -> None:
    assert RunsView.from_query(query_of(view.to_url())) == view
    assert RunsView.from_store(view.to_store()) == view
    assert view.to_store()["url"] == view.to_url()


def test_the_default_view_has_no_query() -> None:
    assert RunsView().to_url() == ""
    assert RunsView.from_query(query_of("")) == RunsView()


@pytest.mark.parametrize(
    "query",
    [
        "?sort=sideways",
        "?sort=",
        "?sort=--name",
        "?page=0",
        "?page=-2",
        "?page=two",
        "?page=99999999999999999999",
        "?config=%3D%3D",
        "?config=lr%3E%3Dabc",
        '?config=a%3D"b',
        "?tag=" + "x" * 129,
        "?state=" + "s" * 17,
        "?q=",
        "?unknown=1",
        "?q&tag&state",
    ],
)
def test_a_malformed_parameter_is_left_out(query: str) -> None:
    assert RunsView.from_query(query_of(query)) == RunsView()


def test_a_malformed_parameter_leaves_the_others() -> None:
    view = RunsView.from_query(query_of("?q=x&sort=up&config=a%3D1&config=b%3E%3Dz&page=2"))
    assert view == RunsView(search="x", config=(ConfigCondition("a", "=", "1"),), page=2)


@pytest.mark.parametrize(
    "store",
    [
        None,
        "junk",
        [1, 2],
        {"q": 5, "tag": "32b", "state": [None, 3], "config": [["a=1"]], "sort": None},
        {"page": True, "sort": ["name"], "tag": [{"x": 1}]},
    ],
)
def test_a_forged_store_reads_as_the_default_view(store: object) -> None:
    view = RunsView.from_store(store)
    assert view.tags == view.states == view.config == ()
    assert (view.sort, view.page) == (DEFAULT_SORT, 1)


def test_bounds_on_what_a_view_keeps() -> None:
    many = "&".join(f"tag=t{i}" for i in range(200))
    assert len(RunsView.from_query(query_of(f"?{many}&tag=t0")).tags) == 64
    assert len(RunsView.from_query(query_of("?q=" + "a" * 5000)).search) == 256


def test_a_change_of_controls_goes_back_to_the_first_page() -> None:
    view = RunsView(search="lr", page=3)
    same = view.with_controls(search="lr", tags=[], states=None, config=(), sort=None)
    assert same is view
    other = view.with_controls(search="lr", tags=["32b"], states=None, config=(), sort=None)
    assert (other.tags, other.page) == (("32b",), 1)
    kept = view.with_controls(search=5, tags="x", states=7, config=None, sort="bad")
    assert kept is view
