"""`normwatch.client.importers`: each format parsed from real files, then imported end to end
through ``python -m normwatch import <format>`` into a real server and read back over HTTP."""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import random
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from normwatch.client import Run
from normwatch.client.importers import (
    ImportAborted,
    ImportFormatError,
    MissingDependencyError,
    ProgressBar,
    import_records,
)
from normwatch.client.importers.jsonl import count_jsonl, parse_jsonl
from normwatch.client.importers.llmc import count_llmc, parse_llmc
from normwatch.client.importers.tensorboard import (
    count_tensorboard,
    parse_tensorboard,
    shortest_float32,
)
from normwatch.client.importers.wandb_csv import count_wandb_csv, parse_wandb_csv
from tensorboardX import FileWriter, SummaryWriter
from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboardX.proto.tensor_pb2 import TensorProto
from tensorboardX.proto.tensor_shape_pb2 import TensorShapeProto

import normwatch
from normwatch.testing import ServerProcess, start_server
from tests.conftest import make_tenant

LLMC_LOG = Path(normwatch.__file__).parent / "data" / "llmc_gpt2_124M_modded-nanogpt.log"
Records = list[tuple[int, dict[str, float]]]


def wire(value: float) -> float | str:
    """A value as the series API spells it, so that NaN compares equal to NaN."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def by_metric(records: Iterable[tuple[int, dict[str, float]]]) -> dict[str, list[object]]:
    """``{metric: [(step, wire value), ...]}`` in step order, a later value of a step winning."""
    points: dict[str, dict[int, float]] = {}
    for step, metrics in records:
        for name, value in metrics.items():
            points.setdefault(name, {})[step] = value
    return {
        name: [(step, wire(value)) for step, value in sorted(steps.items())]
        for name, steps in points.items()
    }


def notes_list() -> tuple[list[str], Callable[[str], None]]:
    notes: list[str] = []
    return notes, notes.append


# --- llm.c ---------------------------------------------------------------------------------


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


# --- JSON lines ----------------------------------------------------------------------------


def test_jsonl_flattens_reads_non_finite_and_notes_skipped_fields_once(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [
        '{"step": 0, "loss": 2.5, "grad": {"norm": {"total": 0.31, "layers.0": 1}}, "tag": "a"}',
        "",
        '{"step": 1, "loss": NaN, "grad": {"norm": {"total": Infinity}}, "tag": "b"}',
        '{"step": 2, "loss": "NaN", "lr": "-Infinity", "z": "inf", "ok": true, "n": null}',
        '{"step": 3.0, "loss": -Infinity, "hist": [1, 2], "_runtime": 9.5, "_wandb": {"x": 1}}',
        '{"step": 4, "note": "only text"}',
        '{"step": 5, "loss": 12345678901234567890}',
    ]
    path.write_text("\n".join(lines) + "\n")
    notes, sink = notes_list()

    records = list(parse_jsonl(path, notes=sink))

    assert by_metric(records) == {
        "loss": [(0, 2.5), (1, "NaN"), (2, "NaN"), (3, "-Infinity"), (5, 1.2345678901234567e19)],
        "grad/norm/total": [(0, 0.31), (1, "Infinity")],
        "grad/norm/layers.0": [(0, 1.0)],
        "lr": [(2, "-Infinity")],
        "z": [(2, "Infinity")],
    }
    assert records[0] == (0, {"loss": 2.5, "grad/norm/total": 0.31, "grad/norm/layers.0": 1.0})
    assert [step for step, _ in records] == [0, 1, 2, 3, 5]
    assert notes == [
        "skipped non-numeric field 'tag' (text, line 1)",
        "skipped non-numeric field 'ok' (a boolean, line 4)",
        "skipped non-numeric field 'hist' (a list, line 5)",
        "skipped W&B's own field '_runtime'",
        "skipped W&B's own field '_wandb'",
        "skipped non-numeric field 'note' (text, line 6)",
    ]
    assert count_jsonl(path) == 6


def test_jsonl_step_fields_and_prefix(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text(
        '{"_step": 7, "loss": 1.0}\n'
        '{"global_step": 8, "loss": 2.0}\n'
        '{"step": 9, "global_step": 90, "loss": 3.0}\n'
    )
    assert list(parse_jsonl(path, prefix="train/")) == [
        (7, {"train/loss": 1.0}),
        (8, {"train/loss": 2.0}),
        (9, {"train/global_step": 90.0, "train/loss": 3.0}),
    ]
    custom = tmp_path / "custom.jsonl"
    custom.write_text('{"iteration": 4, "step": 1.5, "loss": 0.5}\n')
    assert list(parse_jsonl(custom, step_key="iteration")) == [(4, {"step": 1.5, "loss": 0.5})]


@pytest.mark.parametrize(
    ("line", "where", "reason"),
    [
        ('{"step": 1, "loss": 2.0', "line 2, column 24", "not valid JSON: Expecting ',' delimiter"),
        ('{"loss": 2.0}', "line 2", "no step field ('step', '_step', 'global_step'); name"),
        ('{"step": -1, "loss": 2.0}', "line 2, field 'step'", "expected a non-negative integer"),
        ('{"step": "5", "loss": 2.0}', "line 2, field 'step'", "step, got '5'"),
        ('{"step": 1.5, "loss": 2.0}', "line 2, field 'step'", "step, got 1.5"),
        ("[1, 2]", "line 2", "expected a JSON object with a step and metrics, got a list"),
        ('{"step": 1, "x": 1' + "0" * 400 + "}", "line 2, field 'x'", "too large for a float"),
    ],
)
def test_jsonl_bad_lines_name_file_line_and_field(
    tmp_path: Path, line: str, where: str, reason: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"step": 0, "loss": 1.0}\n' + line + "\n")
    with pytest.raises(ImportFormatError) as caught:
        list(parse_jsonl(path))
    assert caught.value.source == str(path) and caught.value.where == where
    assert str(caught.value).startswith(f"{path}, {where}: ")
    assert reason in caught.value.reason


def test_jsonl_custom_step_key_missing_is_named(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "loss": 1.0}\n')
    with pytest.raises(ImportFormatError, match=r"line 1: no step field \('iter'\)$"):
        list(parse_jsonl(path, step_key="iter"))


# --- W&B CSV -------------------------------------------------------------------------------

HISTORY_CSV = (
    "_step,train/loss,grad/norm/total,_runtime,_timestamp,_wandb.runtime,run_state,lr\n"
    "0,2.5,0.31,1.5,1700000000.1,1,running,\n"
    "1,,NaN,2.5,1700000001.1,2,running,0.001\n"
    "2,nan,inf,3.5,1700000002.1,3,running,\n"
    "3,Infinity,-inf,4.5,1700000003.1,4,running,1e-4\n"
    "4,-Infinity,0.25,5.5,1700000004.1,5,finished,\n"
    "5,,,6.5,1700000005.1,6,finished,\n"
)


def test_wandb_history_csv_skips_internals_and_reads_non_finite(tmp_path: Path) -> None:
    path = tmp_path / "history.csv"
    path.write_text(HISTORY_CSV)
    notes, sink = notes_list()

    records = list(parse_wandb_csv(path, notes=sink))

    assert by_metric(records) == {
        "train/loss": [(0, 2.5), (2, "NaN"), (3, "Infinity"), (4, "-Infinity")],
        "grad/norm/total": [(0, 0.31), (1, "NaN"), (2, "Infinity"), (3, "-Infinity"), (4, 0.25)],
        "lr": [(1, 0.001), (3, 0.0001)],
    }
    assert [step for step, _ in records] == [0, 1, 2, 3, 4]
    assert notes == [
        "skipped W&B's own column '_runtime'",
        "skipped W&B's own column '_timestamp'",
        "skipped W&B's own column '_wandb.runtime'",
        "skipped column 'run_state': its first value, 'running' on line 2, is not a number",
    ]
    assert count_wandb_csv(path) == 6


def test_wandb_chart_export_drops_min_max_and_the_shared_run_name(tmp_path: Path) -> None:
    path = tmp_path / "wandb_export.csv"
    path.write_text(
        "\ufeffStep,exp1 - loss,exp1 - loss__MIN,exp1 - loss__MAX,exp1 - grad/norm\r\n"
        '10,3.5,3.4,3.6,"0.5"\r\n'
        "20,,,,0.75\r\n"
        "30,3.25,3.2,3.3,"  # no final newline
    )
    notes, sink = notes_list()
    assert list(parse_wandb_csv(path, prefix="w", notes=sink)) == [
        (10, {"w/loss": 3.5, "w/grad/norm": 0.5}),
        (20, {"w/grad/norm": 0.75}),
        (30, {"w/loss": 3.25}),
    ]
    assert notes == [
        "skipped 'exp1 - loss__MIN' and the other __MIN/__MAX columns (a grouped chart's range, "
        "not logged values)",
        "columns are named 'exp1 - <metric>' (a W&B chart export); importing them as '<metric>'",
    ]
    assert count_wandb_csv(path) == 3

    two_runs = tmp_path / "two.csv"
    two_runs.write_text("Step,a - loss,b - loss\n1,1.0,2.0\n")
    assert list(parse_wandb_csv(two_runs)) == [(1, {"a - loss": 1.0, "b - loss": 2.0})]
    custom = tmp_path / "custom.csv"
    custom.write_text("epoch,_step,loss\n3,100,0.5\n")
    assert list(parse_wandb_csv(custom, step_key="epoch")) == [(3, {"_step": 100.0, "loss": 0.5})]


@pytest.mark.parametrize(
    ("text", "where", "reason"),
    [
        ("_step,loss\n0,1.0\n1,abc\n", "line 3, column 'loss'", "'abc' is not a number"),
        ("_step,loss\n0,1.0\nx,2.0\n", "line 3, column '_step'", "integer step, got 'x'"),
        ("_step,loss\n0,1.0\n,2.0\n", "line 3, column '_step'", "integer step, got ''"),
        ("_step,loss\n0,1.0\n1,2.0,3.0\n", "line 3", "3 cells, but the header has 2 columns"),
        ("time,loss\n0,1.0\n", "line 1", "no step column ('_step', 'Step', 'step', 'global_step')"),
        ("_step,loss,loss\n0,1,2\n", "line 1", "column 'loss' appears twice"),
        ("", None, "the file is empty; expected a header row"),
    ],
)
def test_wandb_csv_bad_rows_name_file_line_and_column(
    tmp_path: Path, text: str, where: str | None, reason: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ImportFormatError) as caught:
        list(parse_wandb_csv(path))
    assert caught.value.source == str(path) and caught.value.where == where
    assert reason in caught.value.reason


# --- TensorBoard ---------------------------------------------------------------------------


def scalars_metadata() -> SummaryMetadata:
    return SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))


def tf2_scalar(tag: str, tensor: TensorProto, *, first: bool) -> Summary.Value:
    """A summary value as TF2's ``tf.summary.scalar`` writes it: a 0-d tensor of the
    ``scalars`` plugin, the plugin named on the tag's first value only. (tensorboardX's
    writer has no such scalar; its `FileWriter` frames and writes the event.)"""
    if first:
        return Summary.Value(tag=tag, tensor=tensor, metadata=scalars_metadata())
    return Summary.Value(tag=tag, tensor=tensor)


def write_logdir(root: Path) -> None:
    """``train/`` from tensorboardX's `SummaryWriter` (simple values, a histogram, text) and
    ``eval/`` in TF2's tensor format, in two files as after a restart."""
    with SummaryWriter(str(root / "train")) as writer:
        for step, loss in enumerate([2.5, 0.31, float("nan"), float("inf")]):
            writer.add_scalar("loss", loss, step)
            writer.add_scalar("grad/norm/total", 0.1 * (step + 1), step)
        writer.add_histogram("weights", np.arange(10.0), 0)
        writer.add_text("notes", "lr warmup over", 0)
    first = FileWriter(str(root / "eval"), filename_suffix=".0")
    for step in (0, 100, 200):
        content = TensorProto(
            dtype=1, tensor_shape=TensorShapeProto(), tensor_content=struct.pack("<f", 0.7 + step)
        )
        double = TensorProto(dtype=2, tensor_shape=TensorShapeProto(), double_val=[1 / 3 + step])
        values = [
            tf2_scalar("acc", content, first=step == 0),
            tf2_scalar("ppl", double, first=True),
        ]
        first.add_summary(Summary(value=values), step)
    first.close()
    # A restart from the checkpoint at step 100: a new file, steps going back.
    second = FileWriter(str(root / "eval"), filename_suffix=".1")
    half = TensorProto(dtype=19, tensor_shape=TensorShapeProto(), half_val=[0x3C00])  # 1.0
    bfloat16 = TensorProto(dtype=14, tensor_shape=TensorShapeProto(), half_val=[0x4049])  # 3.140625
    floats = TensorProto(dtype=1, tensor_shape=TensorShapeProto(), float_val=[0.25])
    second.add_summary(
        Summary(
            value=[
                tf2_scalar("acc", floats, first=True),
                tf2_scalar("half", half, first=True),
                tf2_scalar("bf16", bfloat16, first=True),
            ]
        ),
        150,
    )
    second.close()


TB_EXPECTED = {
    "eval/acc": [(0, 0.7), (100, 100.7), (150, 0.25), (200, 200.7)],
    "eval/ppl": [(0, 1 / 3), (100, 1 / 3 + 100), (200, 1 / 3 + 200)],
    "eval/half": [(150, 1.0)],
    "eval/bf16": [(150, 3.140625)],
    "train/loss": [(0, 2.5), (1, 0.31), (2, "NaN"), (3, "Infinity")],
    "train/grad/norm/total": [(0, 0.1), (1, 0.2), (2, 0.3), (3, 0.4)],
}


def test_tensorboard_reads_simple_and_tensor_scalars_of_every_run(tmp_path: Path) -> None:
    write_logdir(tmp_path / "logs")
    notes, sink = notes_list()

    records = list(parse_tensorboard(tmp_path / "logs", notes=sink))

    assert by_metric(records) == TB_EXPECTED
    assert records[:3] == [
        (0, {"eval/acc": 0.7, "eval/ppl": 1 / 3}),
        (100, {"eval/acc": 100.7, "eval/ppl": 1 / 3 + 100}),
        (200, {"eval/acc": 200.7, "eval/ppl": 1 / 3 + 200}),
    ]
    assert count_tensorboard(tmp_path / "logs") == len(records) == 12
    assert notes == [
        "run 'eval': steps go back from 200 to 150 at "
        f"{sorted((tmp_path / 'logs' / 'eval').iterdir())[1].name} (a restart from a "
        "checkpoint?); steps imported twice keep their first value",
        "skipped 'histo' values (only scalars are imported)",
        "skipped tensors of 'text' (only scalars are imported)",
    ]


def test_tensorboard_prefixes_and_single_files(tmp_path: Path) -> None:
    write_logdir(tmp_path / "logs")
    unprefixed = by_metric(parse_tensorboard(tmp_path / "logs", run_prefix=False, prefix="tb"))
    assert sorted(unprefixed) == [
        "tb/acc",
        "tb/bf16",
        "tb/grad/norm/total",
        "tb/half",
        "tb/loss",
        "tb/ppl",
    ]
    [train_file] = (tmp_path / "logs" / "train").iterdir()
    assert by_metric(parse_tensorboard(train_file))["loss"] == TB_EXPECTED["train/loss"]
    nested = tmp_path / "sweep"
    with SummaryWriter(str(nested / "lr=0.1" / "seed0")) as writer:
        writer.add_scalar("loss", 1.5, 7)
    assert list(parse_tensorboard(nested)) == [(7, {"lr=0.1/seed0/loss": 1.5})]


def test_tensorboard_damage_is_named_by_file_and_offset(tmp_path: Path) -> None:
    with SummaryWriter(str(tmp_path / "run")) as writer:
        for step in range(3):
            writer.add_scalar("loss", 1.0 + step, step)
    [events] = (tmp_path / "run").iterdir()
    data = bytearray(events.read_bytes())
    offsets = []
    offset = 0
    while offset < len(data):
        offsets.append(offset)
        (length,) = struct.unpack_from("<Q", data, offset)
        offset += 12 + length + 4

    damaged = bytearray(data)
    damaged[offsets[2] + 12 + 5] ^= 0x01  # inside the second scalar event's data
    events.write_bytes(damaged)
    with pytest.raises(ImportFormatError) as caught:
        list(parse_tensorboard(tmp_path))
    assert caught.value.source == str(events)
    assert caught.value.where == f"record at byte {offsets[2]}"
    assert "checksum does not match" in caught.value.reason

    events.write_bytes(data[: offsets[3] + 7])  # a writer stopped mid-record
    notes, sink = notes_list()
    assert list(parse_tensorboard(tmp_path, notes=sink)) == [
        (0, {"run/loss": 1.0}),
        (1, {"run/loss": 2.0}),
    ]
    assert notes == [
        f"{events}: the record at byte {offsets[3]} is cut short (a file still being "
        "written?); the rest of this file is skipped"
    ]

    events.write_bytes(b"not an event file at all")
    with pytest.raises(ImportFormatError, match="record at byte 0: the length checksum"):
        list(parse_tensorboard(events))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ImportFormatError, match="no TensorBoard event files"):
        parse_tensorboard(empty)


def test_tensorboard_without_tensorboardx_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tensorboardX.record_writer", None)
    with pytest.raises(MissingDependencyError) as caught:
        parse_tensorboard(tmp_path)
    assert str(caught.value) == (
        "reading TensorBoard event files needs the 'tensorboardX' package; "
        "install it with: pip install 'normwatch[tensorboard]'"
    )


def test_shortest_float32_matches_numpys_shortest_repr() -> None:
    rng = random.Random(7)
    samples = [0.1, 0.31, 1 / 3, 3.4028234663852886e38, 1e-45, -2.5, 65504.0]
    samples += [rng.uniform(-1e6, 1e6) for _ in range(500)]
    samples += [10 ** rng.uniform(-40, 38) for _ in range(500)]
    for sample in samples:
        single = np.float32(sample)
        got = shortest_float32(float(single))
        assert got == float(str(single)), sample
        assert np.float32(got) == single
    assert math.isnan(shortest_float32(math.nan)) and shortest_float32(-math.inf) == -math.inf


# --- progress bar and import_records -------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_bar_redraws_in_place_with_rate_and_eta() -> None:
    stream, clock = io.StringIO(), FakeClock()
    bar = ProgressBar("gpt2", stream=stream, live=True, clock=clock, columns=120)
    clock.now += 2.0
    bar.update(5_000, total=20_000)
    clock.now += 0.05
    bar.update(5_050, total=20_000)  # within the redraw interval: not drawn
    bar.note("skipped column 'run_state'")  # redraws the bar below the note
    clock.now += 2.0
    bar.update(10_000, total=20_000, status="sending: 1,024 values waiting")
    bar.close()

    first = "gpt2 [#####---------------]  25% 5,000/20,000 steps  2,500 steps/s  ETA 0:06"
    sending = (
        "gpt2 [##########----------]  50% 10,000/20,000 steps  2,469 steps/s  ETA 0:04"
        "  (sending: 1,024 values waiting)"
    )
    final = "gpt2: 10,000 steps in 0:04  2,469 steps/s"
    assert stream.getvalue().split("\r") == [
        "",
        first,
        " " * len(first),
        "note: skipped column 'run_state'\n",
        "gpt2 [#####---------------]  25% 5,050/20,000 steps  2,463 steps/s  ETA 0:06",
        sending,
        final + " " * (len(sending) - len(final)) + "\n",
    ]
    narrow = io.StringIO()
    cut = ProgressBar("gpt2", stream=narrow, live=True, clock=clock, columns=40)
    cut.update(1, total=2)
    assert narrow.getvalue() == "\r" + "gpt2 [##########----------]  50% 1/2 steps"[:39]


def test_progress_bar_writes_plain_lines_when_not_on_a_terminal() -> None:
    stream, clock = io.StringIO(), FakeClock()
    bar = ProgressBar("run", unit="rows", stream=stream, clock=clock, line_interval=10.0)
    for _ in range(30):
        clock.now += 1.0
        bar.update(int(clock.now - 100) * 10)
    bar.close()
    assert stream.getvalue().splitlines() == [
        "run: 10 rows  10 rows/s",
        "run: 110 rows  10 rows/s",
        "run: 210 rows  10 rows/s",
        "run: 300 rows in 0:30  10 rows/s",
    ]


class Ingest:
    """The ingest endpoints in memory; ``create_status`` and ``metrics_status`` inject faults."""

    def __init__(self, *, create_status: int = 200, metrics_status: int = 202) -> None:
        self.create_status = create_status
        self.metrics_status = metrics_status
        self.points: dict[tuple[int, str], object] = {}

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/runs":
            body = {"id": "r1", "segment": 1} if self.create_status == 200 else {"detail": "no"}
            return httpx.Response(self.create_status, json=body)
        if request.method == "PATCH":
            return httpx.Response(200, json={})
        if self.metrics_status != 202:
            return httpx.Response(self.metrics_status, headers={"Retry-After": "0"})
        batch = json.loads(gzip.decompress(request.content))
        for name, column in batch["metrics"].items():
            for step, value in zip(batch["steps"], column, strict=True):
                if value is not None:
                    self.points[(step, name)] = value
        return httpx.Response(202, json={"accepted": 0})

    def run(self, **options: object) -> Run:
        return Run(
            "http://normwatch.test",
            token="t",
            name="imported",
            transport=httpx.MockTransport(self.handle),
            flush_interval=0.01,
            **options,  # type: ignore[arg-type]
        )


def test_import_records_waits_for_the_server_and_loses_nothing(tmp_path: Path) -> None:
    ingest = Ingest()
    run = ingest.run(max_batch_points=64, spool_dir=tmp_path)
    waits: list[int] = []

    def sleep(seconds: float) -> None:
        waits.append(run.pending_points)
        time.sleep(seconds)

    records = ((step, {"loss": step / 10, "grad/norm/total": math.nan}) for step in range(2_000))
    summary = import_records(records, run, total=2_000, max_pending=200, sleep=sleep)
    run.finish(timeout=10)

    assert waits and max(waits) <= 202
    assert (summary.records, summary.steps, summary.points) == (2_000, 2_000, 4_000)
    assert (summary.first_step, summary.last_step) == (0, 1_999)
    assert (summary.sent_points, summary.dropped_points, summary.pending_points) == (4_000, 0, 0)
    assert (summary.run_id, summary.segment) == ("r1", 1)
    assert ingest.points[(1_999, "loss")] == 199.9
    assert ingest.points[(5, "grad/norm/total")] == "NaN"


def test_import_records_gives_up_when_nothing_gets_through(tmp_path: Path) -> None:
    stalled = Ingest(metrics_status=503).run(spool_dir=tmp_path)
    with pytest.raises(ImportAborted, match=r"^the server took no data for 0 s with 10 values"):
        import_records(((step, {"loss": 1.0}) for step in range(10)), stalled, stall_timeout=0.3)
    stalled.finish(timeout=0.1)

    unopened = Ingest(create_status=503).run(spool_dir=tmp_path)
    with pytest.raises(ImportAborted, match=r"^the server did not open the run within 0 s \("):
        import_records(((step, {"loss": 1.0}) for step in range(10)), unopened, stall_timeout=0.3)
    unopened.finish(timeout=0.1)


# --- end to end: the CLI into a real server ------------------------------------------------


@pytest.fixture(scope="module")
def sqlite_server(
    sqlite_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    server = start_server(sqlite_url, tmp_path_factory.mktemp("import-server"))
    yield server
    server.stop()


def normwatch_import(
    server: ServerProcess, token: str, spool: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """``python -m normwatch import *args`` into ``server``, the client's spool in ``spool``."""
    environment = {
        **os.environ,
        "NORMWATCH_URL": server.url,
        "NORMWATCH_TOKEN": token,
        "NORMWATCH_SPOOL_DIR": str(spool),
    }
    return subprocess.run(
        [sys.executable, "-m", "normwatch", "import", *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
    )


def stored_series(server: ServerProcess, token: str, run_name: str) -> dict[str, list[object]]:
    """Every metric of the run, read back whole over the HTTP API."""
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as api:
        [run] = [run for run in api.get("/api/v1/runs").json() if run["name"] == run_name]
        names = [metric["name"] for metric in api.get(f"/api/v1/runs/{run['id']}/metrics").json()]
        answer = api.get(
            f"/api/v1/runs/{run['id']}/series", params={"metric": names, "points": 20_000}
        )
        assert answer.status_code == 200, answer.text
    stored = {}
    for series in answer.json()["series"]:
        assert not series["downsampled"]
        stored[series["metric"]] = list(zip(series["steps"], series["values"], strict=True))
    return stored


def test_cli_imports_the_llmc_log(sqlite_server: ServerProcess, tmp_path: Path) -> None:
    tenant = make_tenant(sqlite_server.database_url)
    done = normwatch_import(sqlite_server, tenant.ingest, tmp_path / "spool", "llmc", str(LLMC_LOG))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "imported 19561 steps (0..19560) into run 'llmc_gpt2_124M_modded-nanogpt': "
        "58,760 values sent, 0 dropped, in "
    )
    assert "llmc_gpt2_124M_modded-nanogpt: 19,561 steps in " in done.stderr
    expected = by_metric(parse_llmc(LLMC_LOG))
    assert stored_series(sqlite_server, tenant.read, "llmc_gpt2_124M_modded-nanogpt") == expected


def test_cli_imports_json_lines(sqlite_server: ServerProcess, tmp_path: Path) -> None:
    tenant = make_tenant(sqlite_server.database_url)
    path = tmp_path / "exp-jsonl.jsonl"
    rng = random.Random(3)
    with path.open("w") as lines:
        for step in range(0, 3_000, 3):
            total = rng.lognormvariate(0, 1)
            grad: dict[str, object] = {"total": total, "layers": {"0": total / 2}}
            if step == 1_500:
                grad["total"] = float("nan")
            document = {"global_step": step, "train": {"loss": 4 - step / 1_000}, "grad": grad}
            document["lr"] = "Infinity" if step == 2_997 else 3e-4
            document["host"] = "tpu-7"
            lines.write(json.dumps(document) + "\n")

    done = normwatch_import(
        sqlite_server, tenant.ingest, tmp_path / "spool", "jsonl", str(path), "--prefix", "j"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("imported 1000 steps (0..2997) into run 'exp-jsonl': 4,000 ")
    assert "note: skipped non-numeric field 'j/host' (text, line 1)" in done.stderr
    stored = stored_series(sqlite_server, tenant.read, "exp-jsonl")
    assert stored == by_metric(parse_jsonl(path, prefix="j"))
    assert stored["j/grad/total"][500] == (1_500, "NaN")
    assert stored["j/lr"][-1] == (2_997, "Infinity")
    assert sorted(stored) == ["j/grad/layers/0", "j/grad/total", "j/lr", "j/train/loss"]

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 0, "loss": 1}\n{"step": 1, "loss": 2\n')
    failed = normwatch_import(
        sqlite_server,
        tenant.ingest,
        tmp_path / "spool",
        "jsonl",
        str(bad),
        "--name",
        "bad",
        "--no-progress",
    )
    assert failed.returncode == 1
    assert f"error: {bad}, line 2, column 22: not valid JSON" in failed.stderr


def test_cli_imports_a_wandb_csv(sqlite_server: ServerProcess, tmp_path: Path) -> None:
    tenant = make_tenant(sqlite_server.database_url)
    path = tmp_path / "history.csv"
    path.write_text(HISTORY_CSV)
    done = normwatch_import(
        sqlite_server,
        tenant.ingest,
        tmp_path / "spool",
        "wandb-csv",
        str(path),
        "--name",
        "wandb-run",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("imported 5 steps (0..4) into run 'wandb-run': 11 values sent")
    assert "note: skipped W&B's own column '_runtime'" in done.stderr
    assert stored_series(sqlite_server, tenant.read, "wandb-run") == {
        "train/loss": [(0, 2.5), (2, "NaN"), (3, "Infinity"), (4, "-Infinity")],
        "grad/norm/total": [(0, 0.31), (1, "NaN"), (2, "Infinity"), (3, "-Infinity"), (4, 0.25)],
        "lr": [(1, 0.001), (3, 0.0001)],
    }


def test_cli_imports_a_tensorboard_logdir(sqlite_server: ServerProcess, tmp_path: Path) -> None:
    tenant = make_tenant(sqlite_server.database_url)
    write_logdir(tmp_path / "tb-run")
    done = normwatch_import(
        sqlite_server, tenant.ingest, tmp_path / "spool", "tensorboard", str(tmp_path / "tb-run")
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("imported 7 steps (0..200) into run 'tb-run': 17 values sent")
    assert "note: skipped 'histo' values (only scalars are imported)" in done.stderr
    assert "tb-run: 12 events in " in done.stderr
    assert stored_series(sqlite_server, tenant.read, "tb-run") == TB_EXPECTED


def test_cli_reports_a_refused_token_and_a_missing_file(
    sqlite_server: ServerProcess, tmp_path: Path
) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 0, "loss": 1}\n')
    refused = normwatch_import(
        sqlite_server, "nw_not-a-token", tmp_path / "spool", "jsonl", str(path)
    )
    assert refused.returncode == 2
    assert refused.stderr == (
        f"error: the server at {sqlite_server.url} refused the token "
        '(HTTP 401: {"detail":"invalid or revoked token"})\n'
    )
    elsewhere = normwatch_import(
        sqlite_server, "t", tmp_path / "spool", "jsonl", str(path), "--url", "http://127.0.0.1:9"
    )
    assert elsewhere.returncode == 2
    assert elsewhere.stderr.startswith("error: cannot reach the server at http://127.0.0.1:9: ")
    missing = normwatch_import(
        sqlite_server, "t", tmp_path / "spool", "wandb-csv", str(tmp_path / "none.csv")
    )
    assert missing.returncode == 2 and "error: no such file" in missing.stderr
