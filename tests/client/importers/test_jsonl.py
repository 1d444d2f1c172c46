"""The JSON lines importer: flattening, non-finite values, step fields and prefixes; bad lines
named by file, line and field.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from normwatch.client.importers import ImportFormatError
from normwatch.client.importers.jsonl import count_jsonl, parse_jsonl
from tests.helpers.training_logs import by_metric, notes_list


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
