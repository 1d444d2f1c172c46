"""Links to the compare page and the metrics it offers: pure functions of run ids and the
runs' metric names, for the page and for the pages that link to it (the runs list)."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlencode

from .run_view import DEFAULT_LEFT

__all__ = ["compare_href", "default_metric", "metric_options"]


def compare_href(
    run_ids: Sequence[str],
    metric: str | None = None,
    *,
    more: Sequence[str] = (),
    group_by: str | None = None,
) -> str:
    """The page comparing ``run_ids`` on ``metric`` (and ``more`` metrics, a panel each),
    their lines grouped by the config key ``group_by`` when given.

    >>> compare_href(["a", "b"], "grad/norm/total")
    '/compare?run=a&run=b&metric=grad%2Fnorm%2Ftotal'
    >>> compare_href(["a", "b", "c"], "loss", more=["grad"], group_by="optimizer.lr")
    '/compare?run=a&run=b&run=c&metric=loss&metric=grad&group_by=optimizer.lr'
    """
    metrics = [metric, *more] if metric else []
    params = [("run", run_id) for run_id in run_ids] + [("metric", m) for m in metrics]
    if group_by:
        params.append(("group_by", group_by))
    return "/compare?" + urlencode(params)


def default_metric(names: Sequence[Sequence[str]]) -> str | None:
    """`DEFAULT_LEFT` when every run logs it, else the first (in the first run's order) that
    every run logs; None when they share none.

    >>> default_metric([["a", "b", "c"], ["c", "b"]]), default_metric([["a"], ["b"]])
    ('b', None)
    """
    if not names:
        return None
    common = set(names[0]).intersection(*names[1:])
    if DEFAULT_LEFT in common:
        return DEFAULT_LEFT
    return next((name for name in names[0] if name in common), None)


def metric_options(names: Sequence[Sequence[str]], metric: str | None) -> list[dict[str, str]]:
    """Every metric any of the runs logs, sorted, then ``metric`` when it is none of them
    (an expression, or a name no run logs), so that the picker shows what is drawn.

    >>> [o["value"] for o in metric_options([["b", "a"], ["c", "a"]], "rss(a*)")]
    ['a', 'b', 'c', 'rss(a*)']
    """
    union = sorted(set().union(*names)) if names else []
    if metric and metric not in union:
        union.append(metric)
    return [{"label": name, "value": name} for name in union]
