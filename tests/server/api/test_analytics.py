"""The analytics endpoints over HTTP against a real server: derived series and the layer grid,
checked against NumPy on the values that were posted."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

from normwatch.client.importers.llmc import parse_llmc_log
from tests.helpers.tenants import Tenant
from tests.helpers.training_logs import LLMC_LOG


def new_run(api: httpx.Client, tenant: Tenant, name: str) -> str:
    r = api.post("/api/v1/runs", json={"name": name}, headers=tenant.headers("ingest"))
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


def post(
    api: httpx.Client, tenant: Tenant, run_id: str, steps: list[int], metrics: dict[str, Any]
) -> None:
    r = api.post(
        f"/api/v1/runs/{run_id}/metrics",
        json={"steps": steps, "metrics": metrics},
        headers=tenant.headers("ingest"),
        timeout=60,
    )
    assert r.status_code == 202, r.text


def series(api: httpx.Client, tenant: Tenant, run_id: str, **params: Any) -> list[dict[str, Any]]:
    r = api.get(f"/api/v1/runs/{run_id}/series", params=params, headers=tenant.headers("read"))
    assert r.status_code == 200, r.text
    return list(r.json()["series"])


@pytest.fixture
def parts_run(api: httpx.Client, tenant: Tenant) -> tuple[str, dict[str, np.ndarray]]:
    """A run whose total grad norm is the root of its three parts' summed squares; the
    lm_head part is logged every step, the others every other step."""
    run_id = new_run(api, tenant, "parts")
    rng = np.random.default_rng(7)
    n = 3000
    columns = {
        "grad/norm/embed": rng.lognormal(-2.0, 0.2, n),
        "grad/norm/layers.0": rng.lognormal(-2.5, 0.2, n),
        "grad/norm/lm_head": rng.lognormal(-1.0, 0.2, n),
    }
    columns["grad/norm/total"] = np.sqrt(sum(np.square(c) for c in columns.values()))
    for lo in range(0, n, 1000):
        steps = list(range(lo, lo + 1000))
        metrics = {
            name: [
                v if name.endswith("lm_head") or s % 2 == 0 else None
                for s, v in zip(steps, c[lo : lo + 1000].tolist(), strict=True)
            ]
            for name, c in columns.items()
        }
        post(api, tenant, run_id, steps, metrics)
    return run_id, columns


def test_derived_series_are_computed_from_every_stored_point(
    api: httpx.Client, tenant: Tenant, parts_run: tuple[str, dict[str, np.ndarray]]
) -> None:
    run_id, c = parts_run
    total, lm_head = c["grad/norm/total"], c["grad/norm/lm_head"]
    even = np.arange(0, 3000, 2)
    asked = [
        "share(grad/norm/lm_head, grad/norm/total)",
        "ratio(grad/norm/lm_head, grad/norm/total)",
        "rss(grad/norm/*)",
        "share(grad/norm/l*, grad/norm/total)",
        "grad/norm/lm_head",
    ]
    got = series(api, tenant, run_id, metric=asked, points=5000)
    assert [s["metric"] for s in got] == asked
    share, ratio, rss, ends, plain = got
    # Both are logged at even steps only (the total is); every one of them comes back.
    assert share["steps"] == even.tolist() and not share["downsampled"]
    np.testing.assert_allclose(share["values"], (lm_head[even] / total[even]) ** 2, rtol=1e-12)
    np.testing.assert_allclose(ratio["values"], lm_head[even] / total[even], rtol=1e-12)
    # The glob meets the total beside its parts: the total gives way (the hierarchy
    # rule), and the parts' root-sum-square is the total itself.
    np.testing.assert_allclose(rss["values"], total[even], rtol=1e-12)
    parts = c["grad/norm/layers.0"] ** 2 + lm_head**2
    np.testing.assert_allclose(ends["values"], parts[even] / total[even] ** 2, rtol=1e-12)
    assert plain["steps"] == list(range(3000))


def test_a_derived_series_is_downsampled_after_it_is_computed(
    api: httpx.Client, tenant: Tenant, parts_run: tuple[str, dict[str, np.ndarray]]
) -> None:
    run_id, c = parts_run
    text = "share(grad/norm/lm_head, grad/norm/total)"
    [got] = series(api, tenant, run_id, metric=text, points=50, start=1000, end=2999)
    assert got["downsampled"] and got["total_points"] == 1000
    assert 100 <= len(got["steps"]) <= 200
    # M4 keeps the exact maximum of the full-resolution share.
    even = np.arange(1000, 3000, 2)
    full = (c["grad/norm/lm_head"][even] / c["grad/norm/total"][even]) ** 2
    assert max(got["values"]) == pytest.approx(float(full.max()), rel=1e-12)
    assert min(got["values"]) == pytest.approx(float(full.min()), rel=1e-12)


@pytest.mark.parametrize(
    ("metric", "message"),
    [
        ("ratio(a)", "ratio takes 2 arguments, got 1"),
        ("share(a, b", "is not closed"),
        ("rss(a, b)", "rss takes 1 argument, got 2"),
    ],
)
def test_a_malformed_expression_is_a_422_naming_the_problem(
    api: httpx.Client, tenant: Tenant, metric: str, message: str
) -> None:
    run_id = new_run(api, tenant, "malformed")
    r = api.get(
        f"/api/v1/runs/{run_id}/series", params={"metric": metric}, headers=tenant.headers("read")
    )
    assert r.status_code == 422 and message in r.json()["detail"], r.text


def test_an_expression_over_metrics_never_logged_is_a_404_naming_them(
    api: httpx.Client, tenant: Tenant, parts_run: tuple[str, dict[str, np.ndarray]]
) -> None:
    run_id, _ = parts_run
    r = api.get(
        f"/api/v1/runs/{run_id}/series",
        params={"metric": ["grad/norm/total", "share(nothing/*, grad/norm/totl)"]},
        headers=tenant.headers("read"),
    )
    assert r.status_code == 404, r.text
    assert r.json()["unknown"] == ["nothing/*", "grad/norm/totl"]
    assert r.json()["suggestions"] == {"nothing/*": [], "grad/norm/totl": ["grad/norm/total"]}


def test_layers_come_back_in_depth_order_with_their_u_index(
    api: httpx.Client, tenant: Tenant
) -> None:
    run_id = new_run(api, tenant, "layers")
    names = ["embed", *(f"layers.{i}" for i in range(48)), "lm_head"]
    rng = np.random.default_rng(1)
    shuffled = list(rng.permutation(names))
    steps = list(range(0, 200))
    depth = np.abs(np.arange(len(names)) - 24.5)  # larger at both ends: a U
    value = {n: 0.1 + 0.01 * float(depth[names.index(n)]) ** 2 for n in names}
    metrics = {f"grad/norm/{n}": [value[n] * (1 + s / 100) for s in steps] for n in shuffled}
    metrics["grad/norm/total"] = [1.0] * len(steps)
    post(api, tenant, run_id, steps, metrics)
    r = api.get(
        f"/api/v1/runs/{run_id}/layers",
        params={"prefix": "grad/norm", "points": 50, "at": 101},
        headers=tenant.headers("read"),
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["layers"] == names
    assert body["bucketed"] and len(body["steps"]) == 50 and body["steps"][:3] == [0, 4, 8]
    # Each cell is its bucket's largest value: the bucket's last step, as values grow.
    for layer, row in zip(names, body["values"], strict=True):
        assert row[0] == pytest.approx(value[layer] * 1.03, rel=1e-12)
    middle = np.median([value[n] for n in names[1:-1]])
    u = (value["embed"] + value["lm_head"]) / 2 / middle
    assert body["u_index"][0] == pytest.approx(u, rel=1e-12)
    profile = body["profile"]
    assert profile["step"] == 101 and profile["steps"] == [101] * len(names)
    assert profile["values"] == pytest.approx([value[n] * 2.01 for n in names], rel=1e-12)
    assert profile["u_index"] == pytest.approx(u, rel=1e-12)
    assert profile["relative_to"] is None and profile["baselines"] is None
    # Over each layer's baseline, the median of its 32 values before step 100: 1.835 times
    # its value at step 0 (steps 68-99, up 1 % of it a step), so 2.01 / 1.835 at step 101.
    relative = api.get(
        f"/api/v1/runs/{run_id}/layers",
        params={"prefix": "grad/norm", "at": 101, "relative_to": "baseline", "baseline_end": 100},
        headers=tenant.headers("read"),
    ).json()["profile"]
    assert relative["relative_to"] == "baseline"
    assert relative["values"] == pytest.approx([2.01 / 1.835] * len(names), rel=1e-9)
    refused = api.get(
        f"/api/v1/runs/{run_id}/layers",
        params={"prefix": "grad/norm", "at": 101, "relative_to": "peak"},
        headers=tenant.headers("read"),
    )
    assert refused.status_code == 422 and "relative_to" in refused.text


def seeded_spikes(n: int = 3000) -> tuple[list[int], dict[str, list[float]], list[int]]:
    """A quiet run whose update norm spikes 8 steps before each loss spike, plus one update
    spike that no loss spike follows."""
    rng = np.random.default_rng(3)
    steps = list(range(n))
    update = 1.0 + 0.01 * rng.standard_normal(n)
    loss = 3.0 - np.arange(n) / n + 0.005 * rng.standard_normal(n)
    leads = [500, 1100, 1700, 2300]
    for at in leads:
        update[at] *= 2.0
        loss[at + 8 : at + 12] += 0.5
    update[2700] *= 2.0
    return steps, {"updates/norm/total": update.tolist(), "train/loss": loss.tolist()}, leads


def test_spikes_list_each_spike_and_which_metric_leads(api: httpx.Client, tenant: Tenant) -> None:
    run_id = new_run(api, tenant, "spiky")
    steps, metrics, leads = seeded_spikes()
    post(api, tenant, run_id, steps, metrics)
    r = api.get(
        f"/api/v1/runs/{run_id}/spikes",
        params={"metric": ["updates/norm/total", "train/loss"]},
        headers=tenant.headers("read"),
    )
    assert r.status_code == 200, r.text
    body = r.json()
    found = [(s["metric"], s["start"]) for s in body["spikes"]]
    expected = [("updates/norm/total", at) for at in [*leads, 2700]]
    expected += [("train/loss", at + 8) for at in leads]
    assert sorted(found, key=lambda f: (f[1], f[0])) == sorted(expected, key=lambda f: (f[1], f[0]))
    for spike in body["spikes"]:
        assert spike["recovered"] and spike["start"] <= spike["peak"] <= spike["end"]
        if spike["metric"] == "train/loss":  # a 4-step plateau, 0.5 above the trend
            assert spike["peak"] - spike["start"] < 4 and spike["end"] - spike["start"] >= 4
    [forward, backward] = body["lead_lag"]
    assert forward == {
        "leader": "updates/norm/total",
        "follower": "train/loss",
        "lag_steps": 8.0,
        "matched": 4,
        "unmatched_leader": 1,
    }
    assert (backward["leader"], backward["matched"]) == ("train/loss", 0)
    assert 0 < body["fraction_in_spikes"]["train/loss"] < 0.02
    assert body["fraction_in_window"] is None
    windowed = api.get(
        f"/api/v1/runs/{run_id}/spikes",
        params={"metric": "train/loss", "start": 1000, "end": 1999},
        headers=tenant.headers("read"),
    ).json()
    assert [s["start"] for s in windowed["spikes"]] == [1108, 1708]
    whole = windowed["fraction_in_spikes"]["train/loss"]
    assert windowed["fraction_in_window"]["train/loss"] > whole > 0


def test_the_threshold_says_how_many_noise_sds_make_a_spike(
    api: httpx.Client, tenant: Tenant
) -> None:
    """Bumps of about 8 noise SDs (and 6 %) are spikes at the default 5.25 SDs, as the
    contract's default must find 7-SD, 5 % spikes, and not at 10, where the answer says
    that 4 SDs would find 3 more; each threshold's answer says its threshold and noise, and
    is its own, asked in either order."""
    run_id = new_run(api, tenant, "noisy")
    rng = np.random.default_rng(5)
    loss = 2.7 + 0.02 * rng.standard_normal(2000)
    bumps = [600, 1100, 1600]
    for at in bumps:
        loss[at : at + 5] += 0.16  # 6 % of the level: 8 noise SDs
    post(api, tenant, run_id, list(range(2000)), {"train/loss": loss.tolist()})

    def answer(**params: Any) -> dict[str, Any]:
        r = api.get(
            f"/api/v1/runs/{run_id}/spikes",
            params={"metric": "train/loss", **params},
            headers=tenant.headers("read"),
        )
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def starts(**params: Any) -> list[int]:
        return [spike["start"] for spike in answer(**params)["spikes"]]

    found = starts()
    assert len(found) == 3 and all(0 <= f - at <= 1 for f, at in zip(found, bumps, strict=True))
    assert starts(threshold=4.0) == starts(threshold=5.25) == found
    blind = answer(threshold=10)
    missed = 3 - len(blind["spikes"])
    assert blind["threshold"] == 10.0 and missed >= 2
    assert blind["more_at"] == {
        "threshold": 4.0,
        "count": missed,
        "metrics": {"train/loss": missed},
    }
    default = answer()
    assert default["threshold"] == 5.25 and default["more_at"] is None
    assert default["noise"]["train/loss"] == pytest.approx(0.02, rel=0.1)
    assert [s["noise"] for s in default["spikes"]] == pytest.approx([0.02] * 3, rel=0.15)
    for bad, message in [(1.5, "greater than or equal to 2"), (101, "less than or equal to 100")]:
        r = api.get(
            f"/api/v1/runs/{run_id}/spikes",
            params={"metric": "train/loss", "threshold": bad},
            headers=tenant.headers("read"),
        )
        assert r.status_code == 422 and message in r.text, r.text


def test_a_smooth_falling_loss_has_no_spikes(api: httpx.Client, tenant: Tenant) -> None:
    run_id = new_run(api, tenant, "smooth")
    t = np.arange(20_000)
    loss = 2.05 + 9.0 * (1.0 + t / 250.0) ** -0.33
    post(api, tenant, run_id, t.tolist(), {"train/loss": loss.tolist()})
    body = api.get(
        f"/api/v1/runs/{run_id}/spikes",
        params={"metric": "train/loss"},
        headers=tenant.headers("read"),
    ).json()
    assert body["spikes"] == [] and body["fraction_in_spikes"] == {"train/loss": 0.0}


def test_compare_aligns_runs_and_sums_each_up(api: httpx.Client, tenant: Tenant) -> None:
    before = api.post(
        "/api/v1/runs",
        json={"name": "no-qk-norm", "config": {"lr": 3e-4, "model": {"qk_norm": False}}},
        headers=tenant.headers("ingest"),
    ).json()["id"]
    after = api.post(
        "/api/v1/runs",
        json={"name": "qk-norm", "config": {"lr": 3e-4, "model": {"qk_norm": True}}},
        headers=tenant.headers("ingest"),
    ).json()["id"]
    steps, metrics, leads = seeded_spikes()
    post(api, tenant, before, steps, metrics)
    calm = {"train/loss": (3.0 - np.arange(3000) / 3000).tolist()}
    post(api, tenant, after, steps, calm)
    r = api.get(
        "/api/v1/compare",
        params={"run": [before, after], "metric": "train/loss", "points": 100, "start": 0},
        headers=tenant.headers("read"),
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["metric"] == "train/loss"
    assert body["config_diff"] == {"model.qk_norm": [False, True]}
    first, second = body["runs"]
    assert (first["run"], first["name"], second["name"]) == (before, "no-qk-norm", "qk-norm")
    assert first["series"]["downsampled"] and first["series"]["total_points"] == 3000
    loss = np.array(metrics["train/loss"])
    assert first["summary"]["max"] == float(loss.max())
    assert first["summary"]["final"] == loss[-1] and first["summary"]["final_step"] == 2999
    assert first["summary"]["spike_count"] == len(leads)
    assert second["summary"]["spike_count"] == 0
    assert second["summary"]["fraction_in_spikes"] == 0.0
    assert second["summary"]["slope_per_1k"] == pytest.approx(-1000 / 3000, rel=1e-9)
    slope = np.polyfit(np.arange(3000), loss, 1)[0] * 1000
    assert first["summary"]["slope_per_1k"] == pytest.approx(slope, rel=1e-9)


def test_compare_refuses_another_projects_run(api: httpx.Client, tenant: Tenant) -> None:
    mine = new_run(api, tenant, "mine")
    r = api.get(
        "/api/v1/compare",
        params={"run": [mine, "0" * 32], "metric": "train/loss"},
        headers=tenant.headers("read"),
    )
    assert r.status_code == 404 and "no run with id" in r.text


def test_the_llmc_logs_grad_norm_spikes_are_listed(api: httpx.Client, tenant: Tenant) -> None:
    """The real llm.c GPT-2 124M log: its one-step grad-norm spikes near 4233, 7435, 9025
    and 9954 come back, and the early decay from 15.4 is not read as spikes."""
    run_id = new_run(api, tenant, "llmc")
    with LLMC_LOG.open() as lines:
        records = list(parse_llmc_log(lines))
    for lo in range(0, len(records), 5000):
        part = records[lo : lo + 5000]
        names = sorted({name for _, metrics in part for name in metrics})
        steps = [step for step, _ in part]
        post(api, tenant, run_id, steps, {n: [m.get(n) for _, m in part] for n in names})
    r = api.get(
        f"/api/v1/runs/{run_id}/spikes",
        params={"metric": ["grad/norm/total", "train/loss"]},
        headers=tenant.headers("read"),
    )
    assert r.status_code == 200, r.text
    starts = [s["start"] for s in r.json()["spikes"] if s["metric"] == "grad/norm/total"]
    for near in (4233, 7435, 9025, 9954):
        assert any(abs(start - near) <= 3 for start in starts), (near, starts)
    # At the default 5.25 SDs of its heavy-tailed noise, 120 points stand out (38 at 10);
    # none in the first 300 steps' fall from 15.4.
    assert min(starts) > 300 and len(starts) == 120
    assert r.json()["fraction_in_spikes"]["grad/norm/total"] < 0.03


def norm_growth(n: int = 120_000, at: int = 81_000, gain: float = 2.5, seed: int = 0) -> np.ndarray:
    """A parameter norm growing 2.0 per 1k steps, 2.5 times faster from ``at`` on, plus noise."""
    t = np.arange(n, dtype=np.float64)
    slope = 2.0 / 1000
    trend = 78.4 + slope * t + (gain - 1.0) * slope * np.maximum(t - at, 0.0)
    return trend + 0.3 * np.random.default_rng(seed).standard_normal(n)


def transitions_of(api: httpx.Client, tenant: Tenant, run_id: str, **params: Any) -> dict[str, Any]:
    r = api.get(f"/api/v1/runs/{run_id}/transitions", params=params, headers=tenant.headers("read"))
    assert r.status_code == 200, r.text
    return dict(r.json())


def post_long(api: httpx.Client, tenant: Tenant, run_id: str, **columns: np.ndarray) -> None:
    n = len(next(iter(columns.values())))
    for lo in range(0, n, 40_000):
        steps = list(range(lo, min(n, lo + 40_000)))
        post(
            api,
            tenant,
            run_id,
            steps,
            {k: v[lo : lo + 40_000].tolist() for k, v in columns.items()},
        )


def test_an_event_where_a_norms_slope_grows_reports_the_ratio(
    api: httpx.Client, tenant: Tenant
) -> None:
    run_id = new_run(api, tenant, "81k")
    gain = norm_growth()
    post_long(api, tenant, run_id, **{"params/norm/final_norm.weight": gain, "flat": 0 * gain + 1})
    event = {"step": 81_000, "kind": "config", "text": "near-dropless EP routing"}
    assert (
        api.post(
            f"/api/v1/runs/{run_id}/events", json=event, headers=tenant.headers("ingest")
        ).status_code
        == 201
    )
    body = transitions_of(api, tenant, run_id, metric="params/norm/final_norm.weight")
    first = body["transitions"][0]
    assert (first["step"], first["source"], first["label"]) == (81_000, "event", event["text"])
    fit = first["metrics"]["params/norm/final_norm.weight"]
    assert fit["ratio"] == pytest.approx(2.5, rel=0.1)
    assert fit["slope_before"] == pytest.approx(2.0, rel=0.1)
    assert fit["slope_after"] == pytest.approx(5.0, rel=0.1)
    # Each line over its own points (every step logged): up to 80,999, and from 81,000.
    assert fit["before_segment"][1][0] == 80_999 and fit["after_segment"][0][0] == 81_000
    # The norm bends at the event, it does not jump: its levels either side agree, within
    # six SDs of their difference (noise 0.3, 128 points a side: SD ≈ 0.08).
    assert fit["level_after"] - fit["level_before"] == pytest.approx(0.0, abs=0.5)
    # A detection at the event is the event's, not a second row.
    assert all(abs(t["step"] - 81_000) > 1_500 for t in body["transitions"][1:])


def test_a_change_with_no_event_is_detected_and_a_straight_line_has_none(
    api: httpx.Client, tenant: Tenant
) -> None:
    run_id = new_run(api, tenant, "no-event")
    line = norm_growth(gain=1.0, seed=1)
    post_long(
        api, tenant, run_id, **{"params/norm/a": norm_growth(seed=2), "params/norm/line": line}
    )
    body = transitions_of(api, tenant, run_id, metric="params/norm/a")
    detected = [t for t in body["transitions"] if t["source"] == "detected"]
    assert detected and abs(detected[0]["step"] - 81_000) <= 1_500
    assert detected[0]["detected_in"] == "params/norm/a"
    assert detected[0]["metrics"]["params/norm/a"]["ratio"] == pytest.approx(2.5, rel=0.15)
    assert transitions_of(api, tenant, run_id, metric="params/norm/line")["transitions"] == []
    # Both metrics on one chart: the change found in one is fitted for both.
    both = transitions_of(api, tenant, run_id, metric=["params/norm/line", "params/norm/a"])
    [row] = [t for t in both["transitions"] if t["source"] == "detected"]
    assert set(row["metrics"]) == {"params/norm/line", "params/norm/a"}
    assert row["metrics"]["params/norm/line"]["ratio"] == pytest.approx(1.0, rel=0.1)


def test_a_zoom_on_a_spike_looks_for_no_change_of_trend(api: httpx.Client, tenant: Tenant) -> None:
    """Over 106 steps the window is 5 steps a side, too few points to tell a change of trend
    from a spike and its recovery: the spike is not listed as a transition (a fall of 170
    per 1k steps, as it was), the answer says nothing was looked for, and a wider range
    with a real change still finds it."""
    run_id = new_run(api, tenant, "spiky")
    steps = np.arange(0, 4000)
    rng = np.random.default_rng(4)
    grad = 0.6 + 0.03 * rng.standard_normal(len(steps)) + 0.002 * np.maximum(steps - 2500, 0)
    grad[1960:1967] += np.array([0.9, 0.6, 0.4, 0.25, 0.15, 0.08, 0.04])
    post(api, tenant, run_id, steps.tolist(), {"grad/norm/total": grad.tolist()})
    zoom = transitions_of(api, tenant, run_id, metric="grad/norm/total", start=1910, end=2015)
    assert zoom["window"] == 5 and zoom["detecting"] is False
    assert zoom["transitions"] == []
    whole = transitions_of(api, tenant, run_id, metric="grad/norm/total")
    assert whole["detecting"] is True
    detected = [t for t in whole["transitions"] if t["source"] == "detected"]
    assert detected and abs(detected[0]["step"] - 2500) <= 200


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
NORM = "params/norm/final_norm.weight"


def steepening_run(api: httpx.Client, tenant: Tenant) -> str:
    """Steps 0..1,999 of a norm whose slope grows from 2 to 5 per 1k steps at step 1,200
    (where an event says why), and three layers' constant grad norms with their total."""
    run_id = new_run(api, tenant, "bounded")
    t = np.arange(2000, dtype=np.float64)
    norm = 78.0 + 0.002 * t + 0.003 * np.maximum(t - 1200, 0.0)
    parts = {"grad/norm/embed": 0.3, "grad/norm/layers.0": 0.4, "grad/norm/lm_head": 1.2}
    metrics = {name: [value] * 2000 for name, value in parts.items()}
    metrics["grad/norm/total"] = [float(np.sqrt(sum(v * v for v in parts.values())))] * 2000
    metrics[NORM] = norm.tolist()
    post(api, tenant, run_id, list(range(2000)), metrics)
    event = {"step": 1200, "kind": "config", "text": "lr bump"}
    r = api.post(f"/api/v1/runs/{run_id}/events", json=event, headers=tenant.headers("ingest"))
    assert r.status_code == 201, r.text
    return run_id


def test_a_transitions_window_past_the_run_is_clamped_to_it_never_a_500(
    api: httpx.Client, tenant: Tenant
) -> None:
    run_id = steepening_run(api, tenant)
    wide = transitions_of(api, tenant, run_id, metric=NORM, window=2**40)
    # The range analysed is steps 0 to 1,999: the window used, and said, is that.
    assert wide["window"] == 1999
    [row] = wide["transitions"]
    fit = row["metrics"][NORM]
    assert (row["step"], row["label"]) == (1200, "lr bump")
    assert (fit["n_before"], fit["n_after"]) == (1200, 800)  # every point, on each side
    assert fit["slope_before"] == pytest.approx(2.0, rel=1e-9)
    assert fit["slope_after"] == pytest.approx(5.0, rel=1e-9)
    for window in (10**6, INT64_MAX, 1999):
        assert transitions_of(api, tenant, run_id, metric=NORM, window=window) == wide
    for window, message in [
        (0, "Input should be greater than or equal to 1"),
        (INT64_MAX + 1, f"Input should be less than or equal to {INT64_MAX}"),
    ]:
        r = api.get(
            f"/api/v1/runs/{run_id}/transitions",
            params={"metric": NORM, "window": window},
            headers=tenant.headers("read"),
        )
        assert r.status_code == 422 and message in r.text, r.text


def test_every_analytics_endpoint_answers_the_whole_int64_step_range(
    api: httpx.Client, tenant: Tenant
) -> None:
    run_id = steepening_run(api, tenant)
    whole = {"start": INT64_MIN, "end": INT64_MAX}
    read = tenant.headers("read")

    def get(path: str, **params: Any) -> dict[str, Any]:
        r = api.get(path, params={**whole, **params}, headers=read)
        assert r.status_code == 200, r.text
        return dict(r.json())

    base = f"/api/v1/runs/{run_id}"
    [norm] = get(f"{base}/series", metric=NORM, points=20_000)["series"]
    assert norm["steps"] == list(range(2000)) and not norm["downsampled"]
    unranged = transitions_of(api, tenant, run_id, metric=NORM)
    assert get(f"{base}/transitions", metric=NORM) == unranged
    grid = get(f"{base}/layers", prefix="grad/norm", points=4, at=0)
    assert grid["steps"] == [INT64_MIN, -(2**62), 0, 2**62] and grid["bucketed"]
    assert grid["values"] == [[None, None, v, None] for v in (0.3, 0.4, 1.2)]
    assert grid["profile"]["steps"] == [0, 0, 0]
    shares = get(f"{base}/attribution", prefix="grad/norm", points=4)
    assert shares["steps"] == [0] and shares["mismatched"] == []
    spikes = get(f"{base}/spikes", metric=NORM, max_lag=1000)
    assert spikes["fraction_in_window"] == spikes["fraction_in_spikes"] == {NORM: 0.0}
    compared = get("/api/v1/compare", run=run_id, metric=NORM, points=20_000)
    [one] = compared["runs"]
    assert (one["summary"]["points"], one["summary"]["final_step"]) == (2000, 1999)


@pytest.mark.parametrize(
    ("path", "params", "message"),
    [
        ("layers", {"prefix": "grad/norm", "points": 4001}, "less than or equal to 4000"),
        ("attribution", {"prefix": "grad/norm", "points": 4001}, "less than or equal to 4000"),
        ("spikes", {"metric": NORM, "max_lag": 1001}, "less than or equal to 1000"),
        ("series", {"metric": NORM, "points": 20_001}, "less than or equal to 20000"),
        ("compare", {"metric": NORM, "points": 20_001}, "less than or equal to 20000"),
    ],
)
def test_parameters_past_their_fixed_limits_are_422s_naming_the_limit(
    api: httpx.Client, tenant: Tenant, path: str, params: dict[str, Any], message: str
) -> None:
    run_id = new_run(api, tenant, "limits")
    url = "/api/v1/compare" if path == "compare" else f"/api/v1/runs/{run_id}/{path}"
    extra = {"run": run_id} if path == "compare" else {}
    r = api.get(url, params={**params, **extra}, headers=tenant.headers("read"))
    assert r.status_code == 422 and message in r.text, r.text
