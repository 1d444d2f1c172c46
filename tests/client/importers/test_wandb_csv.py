"""The W&B CSV importer: history and chart exports; bad rows named by file, line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from normwatch.client.importers import ImportFormatError
from normwatch.client.importers.wandb_csv import count_wandb_csv, parse_wandb_csv
from tests.helpers.training_logs import HISTORY_CSV, by_metric, notes_list


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


def test_a_step_column_beside_the_step_key_is_a_metric_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.csv"
    path.write_text("global_step,step,loss\n100,0,2.5\n101,1,2.25\n")
    assert list(parse_wandb_csv(path, step_key="global_step")) == [
        (100, {"step": 0.0, "loss": 2.5}),
        (101, {"step": 1.0, "loss": 2.25}),
    ]
