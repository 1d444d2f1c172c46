"""TensorBoard event files: the scalars of every run under a log directory.

A run is a directory holding ``*tfevents*`` files, as TensorBoard sees it. With
``run_prefix`` (the default) the run's path relative to the log directory goes in front of
its tags, like TensorBoard's run names (``logs/train/events.out.tfevents...`` with tag
``loss`` → ``train/loss``). A run's files are read in name order, which is the order they
were created in (the name holds the time).

Two kinds of scalar are read:

* ``simple_value``: TF1's ``tf.summary.scalar``, tensorboardX, PyTorch's ``SummaryWriter``;
* a one-element ``tensor`` of the ``scalars`` plugin: TF2's ``tf.summary.scalar`` and
  TensorBoard's own writers; float, double, half, bfloat16, int32 or int64, held as values
  or as raw bytes. Writers name the plugin only on a tag's first value, so the plugin is
  remembered per run and tag, as TensorBoard does.

float32 values become the shortest decimal that reads back as the same float32 (``0.1``
rather than ``0.10000000149011612``): the number the trainer most likely logged, and the
one TensorBoard shows. Histograms, images, audio, text and other tensors are skipped with a
note per kind.

Files are TFRecord streams: each record is its length (uint64, little-endian), a masked
CRC32C of the length, the data (an ``Event`` protobuf) and a masked CRC32C of the data.
The length checksum of every record and the data checksum of every record a scalar comes
from are verified; a mismatch raises `ImportFormatError` naming the file and byte offset.
A record cut short at the end of a file (one still being written) ends that file, with a
note.

The protobuf classes and the CRC32C come from ``tensorboardX``
(``pip install 'normwatch[tensorboard]'``), imported only when a log is read.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

from ._errors import ImportFormatError, MissingDependencyError, NoteSink, OnceNotes
from ._values import metric_name

__all__ = ["count_tensorboard", "event_files", "parse_tensorboard", "shortest_float32"]

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_FLOAT32 = struct.Struct("<f")

# TensorFlow DataType numbers (tensorflow/core/framework/types.proto).
_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_INT64, _DT_BFLOAT16, _DT_HALF = 1, 2, 3, 9, 14, 19
_CONTENT_FORMAT = {_DT_FLOAT: "<f", _DT_DOUBLE: "<d", _DT_INT32: "<i", _DT_INT64: "<q"}
_VALUE_FIELD = {
    _DT_FLOAT: "float_val",
    _DT_DOUBLE: "double_val",
    _DT_INT32: "int_val",
    _DT_INT64: "int64_val",
    _DT_BFLOAT16: "half_val",
    _DT_HALF: "half_val",
}


@dataclass(frozen=True)
class _Library:
    """The parts of tensorboardX the reader uses."""

    event_from_bytes: Callable[[bytes], Any]
    masked_crc32c: Callable[[bytes], int]
    decode_error: type[Exception]

    @classmethod
    def load(cls) -> _Library:
        try:
            from google.protobuf.message import DecodeError
            from tensorboardX.proto.event_pb2 import Event
            from tensorboardX.record_writer import masked_crc32c
        except ImportError as exc:
            raise MissingDependencyError(
                "reading TensorBoard event files", "tensorboardX", "tensorboard"
            ) from exc
        return cls(Event.FromString, masked_crc32c, DecodeError)


class _NotScalar(Exception):
    """A ``scalars``-plugin tensor that does not hold exactly one real value."""


def parse_tensorboard(
    logdir: str | os.PathLike[str],
    *,
    run_prefix: bool = True,
    prefix: str = "",
    notes: NoteSink | None = None,
) -> Iterator[tuple[int, dict[str, float]]]:
    """Yield ``(step, metrics)`` for each event that holds scalars, run by run, in file order.

    ``logdir`` is a log directory (searched recursively) or one event file. ``prefix`` goes
    in front of every metric name, before the run's. Raises `MissingDependencyError` at
    once when tensorboardX is missing, `ImportFormatError` for a directory without event
    files or a damaged record.
    """
    library = _Library.load()
    files = event_files(logdir)
    return _scalar_events(files, library, run_prefix, prefix, OnceNotes(notes), verify=True)


def count_tensorboard(logdir: str | os.PathLike[str], *, run_prefix: bool = True) -> int:
    """How many records `parse_tensorboard` yields, to size a progress bar.

    Reads every event like the import does but skips the data checksums, the slow part
    of reading when no native CRC32C library is installed.
    """
    library = _Library.load()
    files = event_files(logdir)
    silent = OnceNotes(lambda _: None)
    return sum(1 for _ in _scalar_events(files, library, run_prefix, "", silent, verify=False))


def event_files(logdir: str | os.PathLike[str]) -> list[tuple[str, Path]]:
    """``(run, file)`` for every event file under ``logdir``, by run and then file name.

    The run is the file's directory relative to ``logdir`` (``""`` for ``logdir`` itself
    or when ``logdir`` is a file).
    """
    root = Path(logdir)
    if root.is_file():
        return [("", root)]
    if not root.is_dir():
        raise ImportFormatError(root, None, "no such file or directory")
    found: list[tuple[str, Path]] = []
    for directory, subdirectories, names in os.walk(root):
        subdirectories.sort()
        run = Path(directory).relative_to(root).as_posix()
        for name in sorted(names):
            if "tfevents" in name:
                found.append(("" if run == "." else run, Path(directory, name)))
    if not found:
        raise ImportFormatError(
            root, None, "no TensorBoard event files (events.out.tfevents.*) in it or below"
        )
    found.sort(key=lambda item: (item[0], item[1].name))
    return found


def shortest_float32(value: float) -> float:
    """The shortest decimal that rounds to the same float32 as ``value`` (a float32).

    >>> shortest_float32(struct.unpack("<f", struct.pack("<f", 0.1))[0])
    0.1
    """
    if not math.isfinite(value) or value == 0.0:
        return value
    for digits in range(1, 10):  # 9 significant digits always round-trip a float32
        candidate = float(f"{value:.{digits}g}")
        try:
            if _FLOAT32.unpack(_FLOAT32.pack(candidate))[0] == value:
                return candidate
        except OverflowError:
            continue
    return value


def _scalar_events(
    files: list[tuple[str, Path]],
    library: _Library,
    run_prefix: bool,
    prefix: str,
    once: OnceNotes,
    *,
    verify: bool,
) -> Iterator[tuple[int, dict[str, float]]]:
    runs = [run for run, _ in groupby(files, key=lambda item: item[0])]
    if not run_prefix and len(runs) > 1:
        once(
            "merged-runs",
            f"{len(runs)} runs are imported without their run prefix: where two hold the "
            "same tag at the same step, the first value is kept",
        )
    for run, run_files in groupby(files, key=lambda item: item[0]):
        names_prefix = metric_name(prefix, run) if run_prefix else prefix
        plugins: dict[str, str] = {}
        last_step: int | None = None
        for _, path in run_files:
            first_in_file = True
            for offset, data, data_crc in _records(path, library, once):
                event = _event(data, data_crc, path, offset, library)
                event_step, values = _scalars(event, plugins, once)
                if not values:
                    continue
                if verify and library.masked_crc32c(data) != data_crc:
                    raise ImportFormatError(
                        path,
                        f"record at byte {offset}",
                        "the data checksum does not match (the file is damaged)",
                    )
                if event_step < 0:
                    once("negative-step", f"skipped events with a negative step in {path}")
                    continue
                if first_in_file and last_step is not None and event_step < last_step:
                    once(
                        f"restart:{run}",
                        f"run {run or '.'!r}: steps go back from {last_step} to {event_step} "
                        f"at {path.name} (a restart from a checkpoint?); steps imported twice "
                        "keep their first value",
                    )
                first_in_file = False
                last_step = event_step if last_step is None else max(last_step, event_step)
                yield event_step, {metric_name(names_prefix, t): v for t, v in values.items()}


def _records(path: Path, library: _Library, once: OnceNotes) -> Iterator[tuple[int, bytes, int]]:
    """``(byte offset, data, data checksum)`` for each TFRecord of the file."""
    with path.open("rb") as stream:
        offset = 0
        while header := stream.read(_HEADER.size):
            if len(header) < _HEADER.size:
                _note_truncated(path, offset, once)
                return
            length, length_crc = _HEADER.unpack(header)
            if library.masked_crc32c(header[:8]) != length_crc:
                raise ImportFormatError(
                    path,
                    f"record at byte {offset}",
                    "the length checksum does not match (the file is damaged, or is not "
                    "a TensorBoard event file)",
                )
            body = stream.read(length + _FOOTER.size)
            if len(body) < length + _FOOTER.size:
                _note_truncated(path, offset, once)
                return
            yield offset, body[:length], _FOOTER.unpack_from(body, length)[0]
            offset += _HEADER.size + length + _FOOTER.size


def _note_truncated(path: Path, offset: int, once: OnceNotes) -> None:
    once(
        f"truncated:{path}",
        f"{path}: the record at byte {offset} is cut short (a file still being written?); "
        "the rest of this file is skipped",
    )


def _event(data: bytes, data_crc: int, path: Path, offset: int, library: _Library) -> Any:
    try:
        return library.event_from_bytes(data)
    except library.decode_error:
        damaged = library.masked_crc32c(data) != data_crc
        raise ImportFormatError(
            path,
            f"record at byte {offset}",
            "the data checksum does not match (the file is damaged)"
            if damaged
            else "the record is not a TensorBoard Event",
        ) from None


def _scalars(event: Any, plugins: dict[str, str], once: OnceNotes) -> tuple[int, dict[str, float]]:
    """The event's step and its scalar values by tag (empty for other events)."""
    values: dict[str, float] = {}
    if not event.HasField("summary"):
        return int(event.step), values
    for value in event.summary.value:
        tag = str(value.tag)
        if value.HasField("metadata") and value.metadata.plugin_data.plugin_name:
            plugins[tag] = str(value.metadata.plugin_data.plugin_name)
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            values[tag] = shortest_float32(float(value.simple_value))
        elif kind == "tensor" and plugins.get(tag) == "scalars":
            try:
                values[tag] = _tensor_scalar(value.tensor)
            except _NotScalar as exc:
                once(f"bad-tensor:{tag}", f"skipped scalars of tag {tag!r}: the tensor {exc}")
        elif kind == "tensor":
            plugin = plugins.get(tag, "no plugin named")
            once(f"skip:{plugin}", f"skipped tensors of {plugin!r} (only scalars are imported)")
        elif kind is not None:
            once(f"skip:{kind}", f"skipped {kind!r} values (only scalars are imported)")
    return int(event.step), values


def _tensor_scalar(tensor: Any) -> float:
    """The one value of a ``TensorProto``; `_NotScalar` if it holds another number of values."""
    dtype = int(tensor.dtype)
    size = math.prod(int(dim.size) for dim in tensor.tensor_shape.dim)
    if size != 1:
        raise _NotScalar(f"has {size} values")
    if dtype not in _VALUE_FIELD:
        raise _NotScalar(f"has data type {dtype}, not a real number")
    content = bytes(tensor.tensor_content)
    if content:
        # Raw little-endian bytes: TF2's summary ops write scalars this way.
        if dtype in (_DT_HALF, _DT_BFLOAT16):
            if len(content) != 2:
                raise _NotScalar(f"holds {len(content)} bytes for a 2-byte value")
            return _from_16_bits(dtype, int.from_bytes(content, "little"))
        layout = struct.Struct(_CONTENT_FORMAT[dtype])
        if len(content) != layout.size:
            raise _NotScalar(f"holds {len(content)} bytes for a {layout.size}-byte value")
        number = float(layout.unpack(content)[0])
    else:
        held = getattr(tensor, _VALUE_FIELD[dtype])
        if not len(held):
            raise _NotScalar("holds no value")
        if dtype in (_DT_HALF, _DT_BFLOAT16):
            return _from_16_bits(dtype, int(held[0]))
        number = float(held[0])
    return shortest_float32(number) if dtype == _DT_FLOAT else number


def _from_16_bits(dtype: int, bits: int) -> float:
    """A half or bfloat16 value from its bit pattern (TensorProto keeps both as integers)."""
    bits &= 0xFFFF
    if dtype == _DT_HALF:
        return float(struct.unpack("<e", bits.to_bytes(2, "little"))[0])
    return float(_FLOAT32.unpack((bits << 16).to_bytes(4, "little"))[0])
