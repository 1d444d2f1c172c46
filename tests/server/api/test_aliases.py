"""Metric aliases over HTTP to a real server: the presets, a project's choice of them, and
series, listings and alert rules that resolve canonical names to stored aliases."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

from normwatch.testing import ServerProcess
from tests.helpers.api import client_for, create_run, post_metrics
from tests.helpers.tenants import Tenant

OLMO = {"optim/total grad norm": [1.5, 2.5, 9.0], "train/CE loss": [4.0, 3.5, 3.25]}


def put_aliases(api: httpx.Client, tenant: Tenant, **body: Any) -> httpx.Response:
    return api.put(f"/api/v1/projects/{tenant.project}/aliases", json=body)


def series(api: httpx.Client, run: str, *metrics: str) -> list[dict[str, Any]]:
    r = api.get(f"/api/v1/runs/{run}/series", params={"metric": list(metrics)})
    assert r.status_code == 200, r.text
    return list(r.json()["series"])


def test_presets_are_listed_with_their_pairs_and_sources(api: httpx.Client, tenant: Tenant) -> None:
    r = api.get("/api/v1/aliases/presets", headers=tenant.headers("read"))
    assert r.status_code == 200, r.text
    presets = {p["name"]: p for p in r.json()}
    assert list(presets) == ["olmo-core", "llm.c", "megatron", "hf-trainer"]
    olmo = presets["olmo-core"]
    assert olmo["title"] == "OLMo-core" and "allenai/OLMo-core" in olmo["source"]
    assert {"alias": "optim/total grad norm", "canonical": "grad/norm/total"} in olmo["aliases"]


def test_a_project_sets_reads_and_replaces_its_aliases(
    server: ServerProcess, tenant: Tenant
) -> None:
    with client_for(server, tenant) as api:
        r = api.get(f"/api/v1/projects/{tenant.project}/aliases")
        assert r.json() == {
            "project": tenant.project,
            "presets": [],
            "aliases": {},
            "resolved": [],
            "revision": 0,
            "updated_by": None,
            "updated_at": None,
        }
        r = put_aliases(api, tenant, presets=["llm.c"], aliases={"my/gnorm": "grad/norm/total"})
        assert r.status_code == 200, r.text
        saved = r.json()
        assert (saved["presets"], saved["aliases"], saved["revision"]) == (
            ["llm.c"],
            {"my/gnorm": "grad/norm/total"},
            1,
        )
        assert saved["resolved"] == [
            {"alias": "norm", "canonical": "grad/norm/total", "origin": "llm.c"},
            {"alias": "trl", "canonical": "train/loss", "origin": "llm.c"},
            {"alias": "tel", "canonical": "val/loss", "origin": "llm.c"},
            {"alias": "lr", "canonical": "optim/lr", "origin": "llm.c"},
            {"alias": "my/gnorm", "canonical": "grad/norm/total", "origin": "custom"},
        ]
        read = api.get(
            f"/api/v1/projects/{tenant.project}/aliases", headers=tenant.headers("read")
        ).json()
        assert read == saved and read["updated_at"] is not None
        again = put_aliases(api, tenant, presets=["olmo-core"]).json()
        assert (again["presets"], again["aliases"], again["revision"]) == (["olmo-core"], {}, 2)


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"presets": ["olmo"]}, 422, "unknown preset 'olmo'"),
        ({"presets": ["llm.c"], "aliases": {"norm": "params/norm/total"}}, 422, "alias 'norm'"),
        ({"aliases": {"a/b": "c/d", "c/d": "a/b"}}, 422, "is a cycle"),
        ({"aliases": {"a/b": "c/d", "c/d": "e/f"}}, 422, "is a chain"),
        ({"aliases": {"grad/*": "grad/norm/total"}}, 422, "is a glob"),
        ({"aliases": {"x" * 513: "grad/norm/total"}}, 422, "at most 512"),
        ({"aliases": {f"a{i}": "b" for i in range(1001)}}, 422, "at most 1000 items"),
        ({"presets": ["llm.c"] * 9}, 422, "at most 8 items"),
        ({"presets": "llm.c"}, 422, "presets"),
        ({"renames": {}}, 422, "renames"),
    ],
)
def test_aliases_that_cannot_resolve_are_refused_and_nothing_changes(
    server: ServerProcess, tenant: Tenant, body: dict[str, Any], status: int, says: str
) -> None:
    with client_for(server, tenant) as api:
        r = put_aliases(api, tenant, **body)
        assert r.status_code == status, r.text
        assert says in r.text
        assert api.get(f"/api/v1/projects/{tenant.project}/aliases").json()["revision"] == 0


def test_only_an_admin_of_the_project_sets_its_aliases(
    server: ServerProcess, tenant: Tenant
) -> None:
    with client_for(server, tenant, "read") as api:
        assert put_aliases(api, tenant, presets=["llm.c"]).status_code == 403
        r = api.get("/api/v1/projects/another-project/aliases")
        assert r.status_code == 403 and "another-project" in r.text
    with client_for(server, tenant) as api:
        r = api.put("/api/v1/projects/another-project/aliases", json={"presets": ["llm.c"]})
        assert r.status_code == 403


def test_series_of_a_canonical_name_read_its_stored_alias(
    server: ServerProcess, tenant: Tenant
) -> None:
    with client_for(server, tenant) as api:
        run = create_run(api, name="olmo", start_step=0)
        post_metrics(api, run, [0, 1, 2], **OLMO)
        # Not logged, and no alias says it is: a 404.
        before = api.get(f"/api/v1/runs/{run}/series", params={"metric": "grad/norm/total"})
        assert before.status_code == 404 and before.json()["unknown"] == ["grad/norm/total"]
        assert put_aliases(api, tenant, presets=["olmo-core"]).status_code == 200
        grad, loss, stored = series(api, run, "grad/norm/total", "train/loss", "train/CE loss")
        assert (grad["metric"], grad["source"]) == ("grad/norm/total", "optim/total grad norm")
        assert (grad["steps"], grad["values"]) == ([0, 1, 2], [1.5, 2.5, 9.0])
        assert (loss["metric"], loss["source"], loss["values"]) == (
            "train/loss",
            "train/CE loss",
            [4.0, 3.5, 3.25],
        )
        assert stored["metric"] == "train/CE loss" and "source" not in stored
        listed = {m["name"]: m for m in api.get(f"/api/v1/runs/{run}/metrics").json()}
        assert listed == {
            "optim/total grad norm": {
                "name": "optim/total grad norm",
                "last_step": 2,
                "last_value": 9.0,
                "canonical": "grad/norm/total",
            },
            "train/CE loss": {
                "name": "train/CE loss",
                "last_step": 2,
                "last_value": 3.25,
                "canonical": "train/loss",
            },
        }


def test_a_stored_canonical_name_wins_over_its_alias(server: ServerProcess, tenant: Tenant) -> None:
    with client_for(server, tenant) as api:
        assert put_aliases(api, tenant, presets=["hf-trainer"]).status_code == 200
        run = create_run(api, name="both", start_step=0)
        post_metrics(
            api, run, [0, 1], **{"grad/norm/total": [7.0, 8.0], "train/grad_norm": [1.0, 2.0]}
        )
        [grad] = series(api, run, "grad/norm/total")
        assert (grad["values"], "source" in grad) == ([7.0, 8.0], False)
        listed = api.get(f"/api/v1/runs/{run}/metrics").json()
        assert all("canonical" not in m for m in listed)


def test_derived_series_resolve_their_operands_through_aliases(
    server: ServerProcess, tenant: Tenant
) -> None:
    with client_for(server, tenant) as api:
        assert put_aliases(api, tenant, presets=["megatron"]).status_code == 200
        run = create_run(api, name="megatron", start_step=0)
        post_metrics(
            api,
            run,
            [0, 1],
            **{
                "grad-norm": [3.0, 6.0],
                "params-norm": [300.0, 400.0],
                "params/norm/final_norm.weight": [4.0, 0.0],
            },
        )
        ratio, rss, totals = series(
            api,
            run,
            "ratio(grad/norm/total, params/norm/total)",
            "rss(params/norm/*)",
            "rss(*/norm/total)",
        )
        assert (ratio["metric"], ratio["values"]) == (
            "ratio(grad/norm/total, params/norm/total)",
            [0.01, 0.015],
        )
        # The total, seen through its alias, gives way to the part beside it.
        assert rss["values"] == [4.0, 0.0]
        # Two totals through their aliases, none beside a part of its own: both count.
        assert totals["values"] == [
            pytest.approx(math.hypot(300.0, 3.0), rel=1e-15),
            pytest.approx(math.hypot(400.0, 6.0), rel=1e-15),
        ]


def test_a_rule_on_the_canonical_name_fires_on_the_stored_alias(
    server: ServerProcess, tenant: Tenant
) -> None:
    with client_for(server, tenant) as api:
        r = api.post(
            "/api/v1/alert-rules",
            json={
                "name": "grad norm 5+",
                "metric": "grad/norm/total",
                "condition": {"kind": "threshold", "op": ">=", "value": 5.0},
            },
        )
        assert r.status_code == 201, r.text
        run = create_run(api, name="olmo", start_step=0)
        # Before the project has aliases the rule does not see the OLMo-core name.
        post_metrics(api, run, [0], **{"optim/total grad norm": [6.0]})
        assert api.get("/api/v1/alerts", params={"run": run}).json() == []
        assert put_aliases(api, tenant, presets=["olmo-core"]).status_code == 200
        post_metrics(api, run, [1, 2], **{"optim/total grad norm": [1.0, 7.5]})
        [fired] = api.get("/api/v1/alerts", params={"run": run}).json()
        assert (fired["state"], fired["step"], fired["value"], fired["metric"]) == (
            "firing",
            2,
            7.5,
            "optim/total grad norm",
        )
        assert fired["rule"]["name"] == "grad norm 5+"
        # The canonical name logged beside the alias is the one watched.
        both = create_run(api, name="both", start_step=0)
        post_metrics(
            api,
            both,
            [0],
            **{"grad/norm/total": [9.0], "optim/total grad norm": [1.0]},
        )
        [own] = api.get("/api/v1/alerts", params={"run": both}).json()
        assert (own["metric"], own["value"]) == ("grad/norm/total", 9.0)


def test_spikes_of_a_canonical_name_are_found_in_its_stored_alias(
    server: ServerProcess, tenant: Tenant
) -> None:
    with client_for(server, tenant) as api:
        assert put_aliases(api, tenant, presets=["hf-trainer"]).status_code == 200
        run = create_run(api, name="hf", start_step=0)
        values = [1.0 + 0.01 * (s % 3) for s in range(80)]
        values[40] = 12.0
        post_metrics(api, run, list(range(80)), **{"train/grad_norm": values})
        r = api.get(f"/api/v1/runs/{run}/spikes", params={"metric": "grad/norm/total"})
        assert r.status_code == 200, r.text
        [spike] = r.json()["spikes"]
        assert (spike["metric"], spike["peak"], spike["peak_value"]) == (
            "grad/norm/total",
            40,
            12.0,
        )


def test_a_rule_preview_replays_the_stored_alias(server: ServerProcess, tenant: Tenant) -> None:
    with client_for(server, tenant) as api:
        assert put_aliases(api, tenant, presets=["olmo-core"]).status_code == 200
        run = create_run(api, name="olmo", start_step=0)
        post_metrics(api, run, [0, 1, 2], **OLMO)
        rule = api.post(
            "/api/v1/alert-rules",
            json={
                "name": "grad norm 5+",
                "metric": "grad/norm/total",
                "condition": {"kind": "threshold", "op": ">=", "value": 5.0},
            },
        ).json()
        r = api.get(f"/api/v1/alert-rules/{rule['id']}/preview", params={"run": run})
        assert r.status_code == 200, r.text
        preview = r.json()
        assert preview["metrics"] == 1
        assert [(t["metric"], t["state"], t["step"]) for t in preview["transitions"]] == [
            ("optim/total grad norm", "firing", 2)
        ]
