"""``normwatch aliases``: the presets, and a project's aliases set and shown on Postgres."""

from __future__ import annotations

import pytest

from normwatch.cli import main


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_presets_are_printed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "aliases", "presets")
    assert code == 0
    lines = out.splitlines()
    assert lines[:2] == ["olmo-core  (OLMo-core)", "  optim/total grad norm  ->  grad/norm/total"]
    assert "megatron  (Megatron-LM)" in lines and "  grad-norm  ->  grad/norm/total" in lines


def test_aliases_are_set_shown_and_refused(
    fresh_pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NORMWATCH_DATABASE_URL", fresh_pg_url)
    assert run_cli(capsys, "token", "create", "--project", "marin")[0] == 0
    code, out, err = run_cli(
        capsys, "aliases", "set", "--project", "marin", "--preset", "llm.c",
        "--alias", "my/gnorm=grad/norm/total",
    )  # fmt: skip
    assert (code, out) == (0, "project 'marin': 5 aliases (revision 1)\n"), err
    code, out, _ = run_cli(capsys, "aliases", "show", "--project", "marin")
    assert code == 0
    assert out.splitlines() == [
        "norm  ->  grad/norm/total  (llm.c)",
        "trl  ->  train/loss  (llm.c)",
        "tel  ->  val/loss  (llm.c)",
        "lr  ->  optim/lr  (llm.c)",
        "my/gnorm  ->  grad/norm/total  (custom)",
    ]
    code, _, err = run_cli(capsys, "aliases", "set", "--project", "marin", "--preset", "olmo")
    assert code == 1 and "unknown preset 'olmo'" in err
    code, _, err = run_cli(capsys, "aliases", "set", "--project", "nobody", "--preset", "llm.c")
    assert (code, err) == (1, "error: no project named 'nobody'\n")
    assert run_cli(capsys, "aliases", "set", "--project", "marin", "--alias", "nope")[0] == 2
    # Refusals changed nothing.
    assert run_cli(capsys, "aliases", "show", "--project", "marin")[1].count("\n") == 5
