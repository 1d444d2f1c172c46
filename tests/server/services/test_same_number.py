"""One point, one number: the export (pages and CSV text), a series read at full
resolution, the analyses' reads, a spike's ``peak_value`` and a comparison's largest and
final values give the same float64 for the same point, bit for bit, on each backend; the
value logged, for hot points and points compacted as float64. Compacted as float32 (the
opt-in lossy setting) the readers still agree with one another."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

import numpy as np
import pytest

from normwatch.server.aliases import EMPTY
from normwatch.server.db import session_scope
from normwatch.server.services import analytics, export, query
from normwatch.server.services.export_formats import written
from normwatch.server.services.full_resolution import Reader
from normwatch.server.storage.policy import Policy
from tests.helpers.committed import Sessions, compact, new_run, post, the_run
from tests.helpers.databases import BACKENDS, own_sessions
from tests.helpers.floats import TRICKY_FLOATS, bits

GRAD, ODD = "grad/norm/total", "odd/values"
N = 3000
PEAK = 1500


@pytest.fixture(scope="module", params=BACKENDS)
def sessions(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sessions]:
    with own_sessions(request.param, "same_number", tmp_path_factory) as made:
        yield made


def logged() -> tuple[np.ndarray, np.ndarray]:
    """A grad norm as JAX hands it over (float32s, as their exact float64) around 1, with
    one spike at `PEAK` to 2.99993896484375; and a metric of awkward values every step."""
    rng = np.random.default_rng(7)
    grad = (1.0 + 0.01 * rng.standard_normal(N)).astype(np.float32).astype(np.float64)
    grad[PEAK] = 2.99993896484375
    odd = np.resize(np.array(TRICKY_FLOATS), N) * np.where(np.arange(N) % 2, 1.0, 1.0 + 2**-52)
    return grad, odd


def every_reader(sessions: Sessions, run_id: str) -> dict[str, dict[str, np.ndarray]]:
    """Each metric's values at steps 0..N-1 as each reader gives them."""
    out: dict[str, dict[str, np.ndarray]] = {GRAD: {}, ODD: {}}
    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        cols = export.columns(session, run, [GRAD, ODD], EMPTY)
        [page] = list(export.pages(session, run, cols, EMPTY, None, None))
        assert page.steps.tolist() == list(range(N))
        text = b"".join(written("csv", cols, [page])).decode()
        rows = list(csv.reader(io.StringIO(text)))[1:]
        series = query.read_series(session, run, [GRAD, ODD], points=query.MAX_POINTS)
        reader = Reader(session, run, None, None).series([GRAD, ODD])
        for i, name in enumerate((GRAD, ODD)):
            out[name]["export"] = page.values[i]
            out[name]["csv"] = np.array([float(row[i + 1]) for row in rows])
            assert series[i].steps.tolist() == list(range(N)) and not series[i].downsampled
            out[name]["series"] = series[i].values
            out[name]["analysis"] = reader[name][1]
    return out


@pytest.mark.parametrize("stored", ["hot", "float64", "float32"])
def test_every_reader_gives_the_same_number_for_the_same_point(
    sessions: Sessions, stored: str
) -> None:
    run_id = new_run(sessions, name=f"same-{stored}")
    grad, odd = logged()
    post(sessions, run_id, np.arange(N), **{GRAD: grad, ODD: odd})
    if stored != "hot":
        compact(sessions, run_id, Policy(precision=stored))
    read = every_reader(sessions, run_id)
    for name, want in ((GRAD, grad), (ODD, odd)):
        by_reader = read[name]
        first = bits(by_reader["export"])
        for reader, values in by_reader.items():
            assert bits(values) == first, (name, reader)
        if stored == "float32":
            assert np.array_equal(by_reader["export"].astype(np.float32), want.astype(np.float32))
        else:
            assert first == bits(want), name  # what was logged, bit for bit

    with session_scope(sessions) as session:
        run = the_run(session, run_id)
        report = analytics.spike_report(session, run, [GRAD])
        compared = analytics.compare_runs(session, [run], GRAD).model_dump()
    [spike] = [s for s in report.spikes if s["peak"] == PEAK]
    exported = read[GRAD]["export"]
    assert bits([spike["peak_value"]]) == bits([exported[PEAK]])
    if stored != "float32":
        assert spike["peak_value"] == 2.99993896484375
    [summary] = [r["summary"] for r in compared["runs"]]
    assert bits([summary["max"], summary["final"]]) == bits([exported.max(), exported[-1]])
