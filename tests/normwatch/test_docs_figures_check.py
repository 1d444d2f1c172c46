"""`scripts/docs-figures` reports a quoted figure that differs from the measured one, and a
passage that is no longer there, and ``--write`` puts the measured figure in place without
touching the passage's wrapping."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.docs_figures import docs_figures as script


def test_a_stale_figure_is_named_and_written_in_place(tmp_path: Path) -> None:
    docs = script()
    passage = docs.Passage(
        "doc.md", "first reaches 5 at {first}, and {count} of the next 1,999 ({first} again)"
    )
    (tmp_path / "doc.md").write_text(
        "Intro.\nIt first reaches 5 at 83,744, and\n1,850 of the next 1,999 (83,744 again).\n"
    )
    figures = {"first": "83,779", "count": "1,482"}
    problems = docs.apply(figures, write=False, root=tmp_path, passages=(passage,))
    assert problems == [
        "doc.md:3: first is quoted as 83,744, measured 83,779",
        "doc.md:3: count is quoted as 1,850, measured 1,482",
        "doc.md:2: first is quoted as 83,744, measured 83,779",
    ]
    assert docs.apply(figures, write=True, root=tmp_path, passages=(passage,)) == []
    assert (tmp_path / "doc.md").read_text() == (
        "Intro.\nIt first reaches 5 at 83,779, and\n1,482 of the next 1,999 (83,779 again).\n"
    )
    assert docs.apply(figures, write=False, root=tmp_path, passages=(passage,)) == []


def test_a_passage_reworded_without_its_template_is_reported_missing(tmp_path: Path) -> None:
    docs = script()
    passage = docs.Passage("doc.md", "spends {count} of the next 1,999 steps at 5 or more")
    (tmp_path / "doc.md").write_text("It spends 1,482 of the following 1,999 steps at 5.\n")
    problems = docs.apply({"count": "1,482"}, write=True, root=tmp_path, passages=(passage,))
    assert problems == [f"doc.md: passage not found: {passage.template!r}"]


def test_figures_are_whole_numbers_as_printed() -> None:
    docs = script()
    pattern = docs.Passage("doc.md", "grows ×{growth}").pattern()
    assert [m.group("f0") for m in pattern.finditer("grows ×5.2] and grows ×1,200.")] == [
        "5.2",
        "1,200",
    ]
