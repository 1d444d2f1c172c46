"""The llm.c importer: the shipped log parsed and counted exactly; a bad line named."""

from __future__ import annotations

from pathlib import Path

import pytest
from normwatch.client.importers import ImportFormatError
from normwatch.client.importers.llmc import count_llmc, parse_llmc

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
