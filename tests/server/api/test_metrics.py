"""Metric batches over HTTP to a real server: concurrent, overlapping, re-sent and extended
batches of one run, each point stored once.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx

from normwatch.server.api.metrics import IGNORED_METRICS_LISTED, ingest_answer
from normwatch.server.services.ingest import Ingested
from tests.helpers.tenants import Tenant


def post(api: httpx.Client, tenant: Tenant, run_id: str, doc: dict[str, Any]) -> httpx.Response:
    return api.post(
        f"/api/v1/runs/{run_id}/metrics", json=doc, headers=tenant.headers("ingest"), timeout=60
    )


def test_concurrent_overlapping_batches_of_one_run(api: httpx.Client, tenant: Tenant) -> None:
    """Threads posting overlapping batches of one run, steps and names in different orders,
    new names appearing in several at once: every batch is accepted (no deadlock) and
    every point is stored once."""
    r = api.post("/api/v1/runs", json={"name": "concurrent"}, headers=tenant.headers("ingest"))
    assert r.status_code == 200, r.text
    run_id = r.json()["id"]
    names = [f"layer.{i}/grad_norm" for i in range(40)]

    def value(name: str, step: int) -> float:
        return step + names.index(name) / 100

    def doc(lo: int, flip: bool) -> dict[str, Any]:
        steps = list(range(lo, lo + 20))
        order = names[::-1] if flip else names
        if flip:
            steps.reverse()
        return {"steps": steps, "metrics": {n: [value(n, s) for s in steps] for n in order}}

    docs = [doc(lo, flip) for lo in range(0, 100, 10) for flip in (False, True)]
    statuses: list[int] = []
    lock = threading.Lock()

    def send(worker: int) -> None:
        with httpx.Client(base_url=str(api.base_url), timeout=60) as client:
            for d in docs[worker::4] + docs[::-1][worker::4]:
                code = post(client, tenant, run_id, d).status_code
                with lock:
                    statuses.append(code)

    threads = [threading.Thread(target=send, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert statuses == [202] * (2 * len(docs))
    read = {"Authorization": f"Bearer {tenant.read}"}
    got = api.get(
        f"/api/v1/runs/{run_id}/series",
        params={"metric": names[:3] + names[-1:], "points": 1000},
        headers=read,
    ).json()
    for s in got["series"]:
        assert s["steps"] == list(range(110))
        assert s["values"] == [value(s["metric"], step) for step in range(110)]
    listed = {m["name"]: m for m in api.get(f"/api/v1/runs/{run_id}/metrics", headers=read).json()}
    assert sorted(listed) == sorted(names)
    assert all(listed[n]["last_step"] == 109 for n in names)
    assert all(listed[n]["last_value"] == value(n, 109) for n in names)


def test_resent_and_extended_batches_over_http(api: httpx.Client, tenant: Tenant) -> None:
    r = api.post("/api/v1/runs", json={"name": "resend-http"}, headers=tenant.headers("ingest"))
    run_id = r.json()["id"]
    first = {"steps": [0, 1, 2], "metrics": {"a": [0.5, "NaN", None], "b": [1, 2, 3]}}
    r = post(api, tenant, run_id, first)
    assert (r.status_code, r.json()) == (202, {"accepted": 5, "ignored": 0, "segment": 1})
    r = post(api, tenant, run_id, first)  # again, as after a lost answer: nothing stored twice
    assert (r.status_code, r.json()) == (
        202,
        {"accepted": 0, "ignored": 5, "ignored_metrics": {"a": 2, "b": 3}, "segment": 1},
    )
    more = {"steps": [2, 3], "metrics": {"a": [9.0, 9.5], "new": ["-Infinity", 7.0]}}
    assert post(api, tenant, run_id, more).json() == {
        "accepted": 4,
        "ignored": 0,
        "segment": 1,
    }
    read = {"Authorization": f"Bearer {tenant.read}"}
    got = api.get(
        f"/api/v1/runs/{run_id}/series", params={"metric": ["a", "b", "new"]}, headers=read
    ).json()
    by_name = {s["metric"]: (s["steps"], s["values"]) for s in got["series"]}
    assert by_name == {
        "a": ([0, 1, 2, 3], [0.5, "NaN", 9.0, 9.5]),
        "b": ([0, 1, 2], [1.0, 2.0, 3.0]),
        "new": ([2, 3], ["-Infinity", 7.0]),
    }


def test_the_answer_names_at_most_a_hundred_metrics_those_with_the_most_ignored() -> None:
    ignored = {f"m{i:03d}": 1 + i % 7 for i in range(250)}
    answer = ingest_answer(Ingested(40, 2, 0, ignored))
    listed = answer["ignored_metrics"]
    assert isinstance(listed, dict) and len(listed) == IGNORED_METRICS_LISTED == 100
    assert (answer["accepted"], answer["ignored"], answer["segment"]) == (
        40,
        sum(ignored.values()),
        2,
    )
    assert min(listed.values()) >= max(c for n, c in ignored.items() if n not in listed)
    assert all(ignored[name] == count for name, count in listed.items())
    assert ingest_answer(Ingested(3, 1, 0)) == {"accepted": 3, "ignored": 0, "segment": 1}
