"""Every stored point of some of a run's metrics, a page of steps at a time: the export.

A chart read answers a range with a few thousand points; an export answers it with every
point stored, which for a long run is tens of millions. So the range is cut into pages of
steps that each hold about `PAGE_POINTS` stored points of the metrics asked for (counted
from the chunks' and hot blocks' sizes, before any point is read), and each page is read,
merged by step and handed on before the next is read: memory stays one page's, whatever
the run's length.

A column is a stored metric (a name the run logged, or a canonical name whose alias it
logged), each metric a glob matches, or a derived expression (`analytics.derived`, computed
from every stored point of its inputs in the page: the functions are pointwise, so pages
change nothing). Values come out exactly as stored: a float32-compacted value as the
float64 of its shortest decimal (`chunks.readable`), so that it prints as the float32's
shortest repr.

Every page is read in the one snapshot the export began with, so a compaction running
meanwhile neither loses nor doubles a point.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlalchemy.orm import Session, sessionmaker

from ..aliases import AliasMap
from ..analytics import derived
from ..db import begin_snapshot
from ..errors import Invalid
from ..models import Run
from ..storage import across, chunks
from ..storage.points import series_keys
from ..storage.runs import Lineage, lineage_of, segments_of
from ..storage.sql import fetch, padded
from .full_resolution import MAX_ANALYSIS_SERIES, Budget, Reader
from .query import compute, parse_expression
from .unknown_names import require_known

__all__ = [
    "MAX_COLUMNS",
    "PAGE_POINTS",
    "Column",
    "Page",
    "columns",
    "file_stem",
    "lineage_upto",
    "pages",
    "streamed",
]

_UNSAFE = re.compile(r"[^0-9A-Za-z._-]+")

PAGE_POINTS = 1 << 17
"""Stored points (all columns together) a page reads, about: 131,072, some 2 MB."""

MAX_COLUMNS = MAX_ANALYSIS_SERIES
"""Most columns one export has, globs expanded (the analyses' bound on series read)."""

StepArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Column:
    """One column of an export: its ``header``, and where its values come from."""

    header: str
    stored: str | None
    """The stored metric read (an alias resolved), or None for an expression."""
    expression: derived.Expression | None = None


@dataclass(frozen=True)
class Page:
    """The points of a step range: ``steps`` where any column is logged, ascending, and per
    column its values at those steps and where it has one (``present``)."""

    steps: StepArray
    values: list[FloatArray]
    present: list[BoolArray]

    def __len__(self) -> int:
        return len(self.steps)


def columns(session: Session, run: Run, metrics: Sequence[str], aliases: AliasMap) -> list[Column]:
    """The columns ``metrics`` ask for, in order, each once: a name as itself, a glob as
    each stored metric it matches (in name order), an expression as one column.
    `UnknownMetrics` (404) for names the run never logged and globs that match none of its
    names (an expression's too); `Invalid` (422) for a malformed expression or past
    `MAX_COLUMNS`."""
    reader = Reader(session, run, None, None, aliases=aliases)
    require_known(reader, dict.fromkeys(metrics))
    out: dict[str, Column] = {}
    for text in dict.fromkeys(metrics):
        if derived.is_derived(text):
            out.setdefault(text, Column(text, None, parse_expression(text)))
            continue
        name = derived.Name(text)
        if name.is_glob:
            for stored in sorted(reader.matching(name)):
                out.setdefault(stored, Column(stored, stored))
        else:
            found = reader.matching(name)
            out.setdefault(text, Column(text, found[0] if found else None))
        if len(out) > MAX_COLUMNS:
            raise Invalid(
                f"this export would have more than {MAX_COLUMNS:,} columns; "
                "name a narrower glob or fewer metrics"
            )
    return list(out.values())


def _inputs(reader: Reader, cols: Sequence[Column]) -> list[str]:
    """Every stored metric the columns read: their own, and their expressions' inputs."""
    names = [c.stored for c in cols if c.stored is not None]
    for col in cols:
        if col.expression is not None:
            for pattern in derived.patterns(col.expression):
                names += reader.matching(derived.Name(pattern))
    return list(dict.fromkeys(names))


def lineage_upto(session: Session, run: Run, segment: int | None) -> Lineage | None:
    """The run's history as it was while ``segment`` was its latest (None: as it is now):
    the steps an earlier trainer logged before a restart from further back replaced them.
    `Invalid` (422) for a segment the run never had."""
    if segment is None:
        return None
    segments = segments_of(session, run.key)
    if not any(seg == segment for seg, _ in segments):
        raise Invalid(
            f"run {run.id} has no segment {segment}; it has "
            + ", ".join(str(seg) for seg, _ in segments)
        )
    return lineage_of([(seg, first) for seg, first in segments if seg <= segment])


def pages(
    session: Session,
    run: Run,
    cols: Sequence[Column],
    aliases: AliasMap,
    start: int | None,
    end: int | None,
    segment: int | None = None,
) -> Iterator[Page]:
    """The columns' points in ``[start, end]`` (either None: open) of the latest history,
    or of the history as it was while ``segment`` was the latest (`lineage_upto`), a page
    at a time, in step order; pages with no point are skipped. ``session`` stays in one
    snapshot."""
    reader = Reader(session, run, None, None, aliases=aliases)
    names = _inputs(reader, cols)
    latest, ids = series_keys(session, run.key, names)
    lineage = lineage_upto(session, run, segment) or latest
    metric_ids = [ids[n] for n in names if n in ids]
    if not metric_ids:
        return
    for lo, hi in _windows(session, run.key, metric_ids, lineage, start, end):
        page = _page(session, run, cols, aliases, lineage, ids, lo, hi)
        if len(page):
            yield page


def streamed(
    sessions: sessionmaker[Session],
    run_key: int,
    cols: Sequence[Column],
    aliases: AliasMap,
    start: int | None,
    end: int | None,
    segment: int | None = None,
) -> Iterator[Page]:
    """`pages` read in a session of their own, one snapshot from the first page to the
    last: what a streamed answer sends after its request's session has closed."""
    with sessions() as reading:
        begin_snapshot(reading)
        found = reading.get(Run, run_key)
        if found is not None:
            yield from pages(reading, found, cols, aliases, start, end, segment)


def file_stem(
    name: str, run_id: str, start: int | None, end: int | None, segment: int | None = None
) -> str:
    """An export file's name without its extension: the run's name made safe, then the
    range asked for and the segment, when given (``lm-1_240-259``)."""
    stem = _UNSAFE.sub("_", name).strip("_") or run_id
    if start is not None or end is not None:
        stem += f"_{'' if start is None else start}-{'' if end is None else end}"
    if segment is not None:
        stem += f"_segment{segment}"
    return stem


def _windows(
    session: Session,
    run_key: int,
    metric_ids: list[int],
    lineage: Lineage,
    start: int | None,
    end: int | None,
) -> list[tuple[int, int]]:
    """Step ranges covering ``[start, end]`` clipped to what is stored, each holding about
    `PAGE_POINTS` stored points: cut where the running count of the stored chunks' and hot
    blocks' points (by their first step) passes a multiple of it."""
    extent = across.extent(session, run_key, metric_ids, lineage)
    if extent is None:
        return []
    lo = extent[0] if start is None else max(start, extent[0])
    hi = extent[1] if end is None else min(end, extent[1])
    if lo > hi:
        return []
    part = padded(metric_ids)
    where = "(" + ", ".join(f":m{i}" for i in range(len(part))) + ")"
    params: dict[str, float] = {f"m{i}": v for i, v in enumerate(part)}
    params.update(rk=run_key, a=lo, b=hi)
    key = f"run_key = :rk AND metric_id IN {where} AND last_step >= :a AND first_step <= :b"
    rows = fetch(
        session.connection(),
        f"SELECT first_step, last_step, count FROM chunks WHERE {key} "
        f"UNION ALL SELECT first_step, last_step, count FROM blocks WHERE {key}",
        params,
    )
    if not rows:
        return [(lo, hi)]
    # Pieces of many metrics start together (a batch's blocks, chunks cut alike), and a
    # page can only be cut where one starts: small enough pieces keep a page near its size.
    firsts, counts = _pieces(rows, max(PAGE_POINTS // (4 * len(metric_ids)), 1))
    order = np.argsort(firsts, kind="stable")
    firsts, counts = firsts[order], counts[order]
    # A cut before each piece that starts a new multiple of PAGE_POINTS.
    before = np.cumsum(counts) - counts
    cut = np.flatnonzero(np.diff(before // PAGE_POINTS) > 0) + 1
    bounds = sorted({int(s) for s in firsts[cut] if lo < s <= hi})
    edges = [lo, *bounds, hi + 1]
    return [(a, b - 1) for a, b in zip(edges[:-1], edges[1:], strict=True) if a <= b - 1]


def _pieces(rows: Sequence[Sequence[int]], most: int) -> tuple[StepArray, StepArray]:
    """First steps and point counts of the stored pieces (chunks, hot blocks), those of
    more than ``most`` points split into equal spans of steps holding equal shares: a hot
    block of a large batch may hold more than a page."""
    firsts = np.fromiter((r[0] for r in rows), np.int64, len(rows))
    lasts = np.fromiter((r[1] for r in rows), np.int64, len(rows))
    counts = np.fromiter((r[2] for r in rows), np.int64, len(rows))
    parts = np.maximum(-(-counts // most), 1)
    if bool((parts == 1).all()):
        return firsts, counts
    which = np.repeat(np.arange(len(rows)), parts)
    j = np.arange(len(which)) - np.repeat(np.cumsum(parts) - parts, parts)
    k = parts[which]
    span = (lasts[which] - firsts[which]).astype(np.float64)
    starts = firsts[which] + np.floor(span * j / k).astype(np.int64)
    shares = counts[which] // k + (j < counts[which] % k)
    return starts, shares


def _page(
    session: Session,
    run: Run,
    cols: Sequence[Column],
    aliases: AliasMap,
    lineage: Lineage,
    ids: dict[str, int],
    lo: int,
    hi: int,
) -> Page:
    stored = list(dict.fromkeys(c.stored for c in cols if c.stored in ids))
    read = across.read(session, run.key, [ids[n] for n in stored], lineage, lo, hi, 0.0, "max")
    series: dict[str, tuple[StepArray, FloatArray]] = {}
    for name, points, narrow in zip(stored, read.series, read.narrow, strict=True):
        exact = points.values
        if narrow is not None and narrow.any():
            exact = exact.copy()
            exact[narrow] = chunks.readable(exact[narrow].astype(np.float32))
        series[name] = (points.steps, exact)
    empty = (np.empty(0, np.int64), np.empty(0, np.float64))
    reader = None
    got: list[tuple[StepArray, FloatArray]] = []
    for col in cols:
        if col.expression is None:
            got.append(series.get(col.stored or "", empty))
            continue
        if reader is None:
            # A page's own budget: it bounds what one page may read, not the export.
            reader = Reader(session, run, lo, hi, budget=Budget(), aliases=aliases, lineage=lineage)
        got.append(compute(reader, col.expression))
    steps = np.unique(np.concatenate([s for s, _ in got])) if got else np.empty(0, np.int64)
    values: list[FloatArray] = []
    present: list[BoolArray] = []
    for s, v in got:
        at = np.searchsorted(steps, s)
        column = np.full(len(steps), np.nan)
        column[at] = v
        mask = np.zeros(len(steps), np.bool_)
        mask[at] = True
        values.append(column)
        present.append(mask)
    return Page(steps, values, present)
