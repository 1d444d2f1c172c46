"""The TensorBoard importer: simple and tensor scalars of every run, prefixes and single files,
damage named by file and offset, and float32 values in their shortest form.
"""

from __future__ import annotations

import math
import random
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from tensorboardX import SummaryWriter

from normwatch.client.importers import ImportFormatError, MissingDependencyError
from normwatch.client.importers.tensorboard import (
    count_tensorboard,
    parse_tensorboard,
    shortest_float32,
)
from tests.helpers.training_logs import TB_EXPECTED, by_metric, notes_list, write_logdir


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
