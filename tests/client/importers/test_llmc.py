"""The llm.c importer: the line format and the shipped log parsed, counted and imported
exactly; a bad line named."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import httpx
import pytest

from normwatch.client import MemoryTracker, Run
from normwatch.client.importers import ImportFormatError
from normwatch.client.importers.llmc import count_llmc, import_llmc, parse_llmc, parse_llmc_log
from tests.helpers.training_logs import LLMC_LOG


def test_llmc_log_parses_with_prefix_and_counts_exactly() -> None:
    records = list(parse_llmc(LLMC_LOG, prefix="gpt2"))
    assert count_llmc(LLMC_LOG) == len(records) == 19_561
    assert records[0] == (
        0,
        {
            "gpt2/val/loss": 11.0092,
            "gpt2/train/loss": 11.0091,
            "gpt2/optim/lr": 1e-6,
            "gpt2/grad/norm/total": 15.37,
        },
    )
    assert dict(records)[7435]["gpt2/train/loss"] == 3.7819


def test_llmc_bad_line_names_file_and_line(tmp_path: Path) -> None:
    log = tmp_path / "main.log"
    log.write_text("banner\ns:0 trl:3.0 lr:0.1 norm:inf\ns:1 trl:x\n")
    with pytest.raises(ImportFormatError) as caught:
        list(parse_llmc(log))
    assert str(caught.value).startswith(f"{log}, line 3: field 'trl:x' has no numeric value")
    assert caught.value.where == "line 3"


LOG = LLMC_LOG


def test_the_shipped_log_parses_completely() -> None:
    with LOG.open() as lines:
        records = list(parse_llmc_log(lines))

    steps = [step for step, _ in records]
    train_steps = [step for step, metrics in records if "train/loss" in metrics]
    val_steps = [step for step, metrics in records if "val/loss" in metrics]
    assert train_steps == list(range(19_560))
    assert val_steps == [*range(0, 19_560, 250), 19_560]
    assert steps == [*range(19_560), 19_560]
    assert records[0] == (
        0,
        {"val/loss": 11.0092, "train/loss": 11.0091, "optim/lr": 1e-6, "grad/norm/total": 15.37},
    )
    assert records[-1] == (19_560, {"val/loss": 3.2722})
    by_step = dict(records)
    assert by_step[7435]["train/loss"] == 3.7819
    assert by_step[7435]["grad/norm/total"] == 1.44


def test_adjacent_lines_of_one_step_merge_in_either_order() -> None:
    lines = [
        "s:249 trl:6.2079 lr:0.000214 norm:1.35",
        "s:250 trl:6.1818 lr:0.000215 norm:0.90",
        "s:250 tel:6.1710",
        "s:251 tel:6.0",
    ]
    assert list(parse_llmc_log(lines)) == [
        (249, {"train/loss": 6.2079, "optim/lr": 0.000214, "grad/norm/total": 1.35}),
        (
            250,
            {"train/loss": 6.1818, "optim/lr": 0.000215, "grad/norm/total": 0.9, "val/loss": 6.171},
        ),
        (251, {"val/loss": 6.0}),
    ]


def test_blank_and_foreign_lines_are_skipped_and_nan_is_read() -> None:
    lines = ["", "   \n", "step 1/100 | loss 3.0", "s:7 trl:-nan lr:0.1 norm:inf extra:1\n"]
    ((step, metrics),) = parse_llmc_log(lines)
    assert step == 7
    assert math.isnan(metrics["train/loss"]) and metrics["grad/norm/total"] == math.inf
    assert set(metrics) == {"train/loss", "optim/lr", "grad/norm/total"}


@pytest.mark.parametrize(
    "bad_line",
    ["s:x trl:3.0", "s:5 trl:abc", "s:5 trl", "s:5", "s:-1 trl:3.0", "s:5 :3.0"],
)
def test_a_malformed_step_line_raises_naming_its_line_number(bad_line: str) -> None:
    lines = ["s:0 trl:3.0 lr:0.1 norm:1.0", "", bad_line]
    with pytest.raises(ValueError, match=r"^line 3: .*s:<step> trl:<loss>"):
        list(parse_llmc_log(lines))


def test_import_streams_every_step_through_log(tmp_path: Path) -> None:
    run = MemoryTracker()
    assert import_llmc(LOG, run) == 19_561
    assert run.history[0][0] == 0 and run.history[-1] == (19_560, {"val/loss": 3.2722})

    bad = tmp_path / "main.log"
    bad.write_text("s:0 trl:3.0 lr:0.1 norm:1.0\ns:oops\n")
    with pytest.raises(ValueError, match="line 2"):
        import_llmc(bad, MemoryTracker())


def test_the_shipped_log_imports_through_a_real_run(tmp_path: Path) -> None:
    received: dict[tuple[int, str], object] = {}

    def ingest(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/runs":
            return httpx.Response(200, json={"id": "llmc", "segment": 1})
        if request.method == "PATCH":  # the final status
            return httpx.Response(200, json={"id": "llmc", "status": "finished"})
        batch = json.loads(gzip.decompress(request.content))
        for name, column in batch["metrics"].items():
            for step, value in zip(batch["steps"], column, strict=True):
                if value is not None:
                    received[(step, name)] = value
        return httpx.Response(202, json={"accepted": 0})

    run = Run(
        "http://normwatch.test",
        token="t",
        name="gpt2-124M",
        transport=httpx.MockTransport(ingest),
        spool_dir=tmp_path,
    )
    assert import_llmc(LOG, run) == 19_561
    run.finish(timeout=10.0)

    assert run.sent_points == len(received) == 19_560 * 3 + 80
    assert received[(7435, "train/loss")] == 3.7819
