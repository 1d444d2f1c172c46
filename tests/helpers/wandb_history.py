"""What an offline wandb run recorded, read back from its own transaction log (``.wandb``).

The file is wandb's LevelDB-style log: a 7-byte header (``:W&B``, a magic number, a
version), then 32 KiB blocks of chunks, each a 7-byte header (CRC32, length, type: full,
first, middle, last) and a piece of a serialised ``wandb.proto.wandb_internal_pb2.Record``.
A block's tail too short for a chunk header is zero padding. The history rows are the
``history`` records, each with its ``_step``, exactly as wandb-core wrote them.
"""

from __future__ import annotations

import json
import math
import struct
import time
from collections.abc import Iterator
from pathlib import Path

from wandb.proto import wandb_internal_pb2

_BLOCK = 32 * 1024
_CHUNK_HEADER = struct.Struct("<IHB")
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _records(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a wandb transaction log"
    position, pending = 7, b""
    while position + _CHUNK_HEADER.size <= len(data):
        left = _BLOCK - position % _BLOCK
        if left < _CHUNK_HEADER.size:
            position += left
            continue
        _, length, kind = _CHUNK_HEADER.unpack_from(data, position)
        if kind == 0:  # the zero-filled rest of a block
            position += left
            continue
        start = position + _CHUNK_HEADER.size
        if start + length > len(data):  # still being written
            return
        chunk = data[start : start + length]
        position = start + length
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            yield pending + chunk
            pending = b""


def _finished_records(path: Path, timeout: float) -> list[wandb_internal_pb2.Record]:
    """The log's records once wandb-core has written the run's exit record, which it does
    after every history row (``run.finish()`` can return before the file has them)."""
    deadline = time.monotonic() + timeout
    while True:
        records = []
        for raw in _records(path) if path.exists() else ():
            record = wandb_internal_pb2.Record()
            record.ParseFromString(raw)
            records.append(record)
        if any(record.WhichOneof("record_type") == "exit" for record in records):
            return records
        assert time.monotonic() < deadline, f"wandb wrote no exit record to {path}"
        time.sleep(0.02)


def recorded_history(path: Path, timeout: float = 10.0) -> dict[int, dict[str, object]]:
    """Each history row wandb recorded for a finished run: ``{_step: {name: value}}``,
    nested keys joined with ``.`` (as W&B names their columns), values decoded from their
    JSON (bare ``NaN`` and ``Infinity`` included), W&B's own ``_step``, ``_runtime`` and
    ``_timestamp`` left out."""
    rows: dict[int, dict[str, object]] = {}
    for record in _finished_records(path, timeout):
        if record.WhichOneof("record_type") != "history":
            continue
        step = record.history.step.num
        assert step not in rows, f"wandb recorded step {step} twice"
        row: dict[str, object] = {}
        for item in record.history.item:
            name = ".".join(item.nested_key) if item.nested_key else item.key
            if name not in ("_step", "_runtime", "_timestamp"):
                row[name] = json.loads(item.value_json)
        rows[step] = row
    return rows


def recorded_numbers(path: Path) -> dict[int, dict[str, float]]:
    """`recorded_history` keeping only the numbers (not booleans) that are metrics, as
    floats: the fields of a media value (``img.width`` beside ``img._type``) are left out.
    Rows left with none are dropped."""
    rows: dict[int, dict[str, float]] = {}
    for step, row in recorded_history(path).items():
        media = tuple(name.removesuffix("_type") for name in row if name.endswith("._type"))
        numbers = {
            name: float(value)
            for name, value in row.items()
            if isinstance(value, int | float)
            and not isinstance(value, bool)
            and not name.startswith(media)
        }
        if numbers:
            rows[step] = numbers
    return rows


def same_number(a: float, b: float) -> bool:
    """Equal, NaN equal to NaN."""
    return a == b or (math.isnan(a) and math.isnan(b))
