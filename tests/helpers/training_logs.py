"""Training logs as the importers read them: the llm.c log shipped with the package, a W&B
history export, a TensorBoard logdir written with tensorboardX (and in TF2's tensor format),
and what each holds, by metric, as the series API spells it.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
from tensorboardX import FileWriter, SummaryWriter
from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboardX.proto.tensor_pb2 import TensorProto
from tensorboardX.proto.tensor_shape_pb2 import TensorShapeProto

import normwatch

LLMC_LOG = Path(normwatch.__file__).parent / "data" / "llmc_gpt2_124M_modded-nanogpt.log"


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
    """The notes an importer writes, and the sink to hand it."""
    notes: list[str] = []
    return notes, notes.append


HISTORY_CSV = (
    "_step,train/loss,grad/norm/total,_runtime,_timestamp,_wandb.runtime,run_state,lr\n"
    "0,2.5,0.31,1.5,1700000000.1,1,running,\n"
    "1,,NaN,2.5,1700000001.1,2,running,0.001\n"
    "2,nan,inf,3.5,1700000002.1,3,running,\n"
    "3,Infinity,-inf,4.5,1700000003.1,4,running,1e-4\n"
    "4,-Infinity,0.25,5.5,1700000004.1,5,finished,\n"
    "5,,,6.5,1700000005.1,6,finished,\n"
)
"""A W&B history export: internal columns, empty cells, and every spelling of NaN and ±inf."""


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
"""What `write_logdir` holds, by metric: (step, value) in step order."""
