"""Reading runs back: `Api`, for notebooks and scripts.

>>> from normwatch.client import Api
>>> api = Api()  # $NORMWATCH_URL and $NORMWATCH_TOKEN (a read token)  # doctest: +SKIP
>>> [run] = api.runs(name="32b-exp1295")  # doctest: +SKIP
>>> h = api.history(run["id"], ["grad/norm/total", "train/loss"])  # doctest: +SKIP
>>> h["step"][:3], h["train/loss"][:3]  # doctest: +SKIP
([0, 1, 2], [10.98, None, 10.42])

`history` is every stored point, exactly as stored, from the server's streamed export
(`GET /runs/{id}/export`): the server reads and sends a page of steps at a time and this side
parses the rows as they arrive, so neither holds more than the answer itself. Each value
arrives as the shortest decimal that reads back as the stored float64, and is read back as
that float64.

The steps are always under ``"step"``. A metric that is itself named ``step`` comes back as
``"step (metric)"`` (and one named ``step (metric)`` as ``step (metric) (metric)``, and so
on: the export's `column_keys` rule), so it never takes the steps' place; every other name
comes back exactly as logged (the ``'`` that the CSV header puts before a name a spreadsheet
would take for a formula, ``=SUM(1,1)``, is taken off again).

`history_frame` builds a pandas DataFrame column by column the same way (8 bytes a value).
The other methods mirror the HTTP API's reads and return its JSON.
"""

from __future__ import annotations

import contextlib
import csv
import fnmatch
import os
from array import array
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

__all__ = ["Api", "ApiError"]

Params = Mapping[str, Any]
_MISSING = object()


class ApiError(RuntimeError):
    """A request the server refused or could not answer: ``status`` and the server's
    ``detail`` (why, and usually how to fix it).

    A read naming metrics the run never logged is a 404 whose ``unknown`` lists them (names
    and globs as written, an expression's on their own) and ``suggestions`` gives, for
    each, the closest names the run has; both are empty for any other refusal:

    >>> try:  # doctest: +SKIP
    ...     api.history(run_id, ["grad/norm/totl"])
    ... except ApiError as e:
    ...     print(e.status, e.unknown, e.suggestions)
    404 ['grad/norm/totl'] {'grad/norm/totl': ['grad/norm/total']}
    """

    def __init__(
        self,
        status: int,
        detail: str,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{method} {path}: {status} {detail}")
        self.status = status
        self.detail = detail
        body = body or {}
        unknown = body.get("unknown")
        suggestions = body.get("suggestions")
        self.unknown: list[str] = [str(n) for n in unknown] if isinstance(unknown, list) else []
        self.suggestions: dict[str, list[str]] = (
            {str(k): [str(n) for n in v] for k, v in suggestions.items() if isinstance(v, list)}
            if isinstance(suggestions, dict)
            else {}
        )


class Api:
    """A read client of one normwatch server, for one project's runs (the token's).

    ``url`` and ``token`` default to ``$NORMWATCH_URL`` and ``$NORMWATCH_TOKEN``; the token
    needs the ``read`` scope (or ``admin``). Every method raises `ApiError` for a refusal
    (a 4xx with the server's reason) and `httpx.HTTPError` when the server is unreachable;
    nothing is retried behind your back. Use it as a context manager, or `close` it.
    """

    def __init__(
        self, url: str | None = None, token: str | None = None, *, timeout: float = 60.0
    ) -> None:
        url = url or os.environ.get("NORMWATCH_URL")
        token = token or os.environ.get("NORMWATCH_TOKEN")
        if not url or not token:
            raise ValueError(
                "Api needs a normwatch server URL and a read token: pass url= and token=, "
                "or set NORMWATCH_URL and NORMWATCH_TOKEN"
            )
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
        )

    def __enter__(self) -> Api:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def __del__(self) -> None:
        # A notebook drops an Api without closing it: hand its connections back then.
        with contextlib.suppress(Exception):
            self._http.close()

    # --- runs -------------------------------------------------------------------------------

    def runs(
        self,
        project: str | None = None,
        *,
        name: str | None = None,
        state: str | Sequence[str] | None = None,
        tags: Sequence[str] | None = None,
        config: Mapping[str, Any] | None = None,
        limit: int = 10_000,
    ) -> list[dict[str, Any]]:
        """The project's runs, most recently active first, each a dict (``id``, ``name``,
        ``project``, ``state``, ``last_step``, ``config``, ``tags``, ...).

        ``name`` matches exactly or as a shell-style pattern (``"lr-*"``); ``state`` is
        ``running``/``finished``/``failed`` or several; a run must carry every one of
        ``tags``; ``config`` maps dotted keys to values the run's config must hold
        (``{"optimizer.lr": 3e-4}``; numbers compare as numbers)."""
        found = self._get("/api/v1/runs", {"project": project, "limit": limit})
        states = {state} if isinstance(state, str) else set(state or ())
        out = []
        for run in found:
            _with_state(run)
            if name is not None and not fnmatch.fnmatchcase(run["name"], name):
                continue
            if states and run["state"] not in states:
                continue
            if tags and not set(tags) <= set(run.get("tags") or ()):
                continue
            if config and not all(
                _same(_dotted(run.get("config") or {}, key), want) for key, want in config.items()
            ):
                continue
            out.append(run)
        return out

    def run(self, run_id: str) -> dict[str, Any]:
        """One run (with its segments: the restarts it went through)."""
        return _with_state(self._get(f"/api/v1/runs/{run_id}"))

    def metrics(self, run_id: str) -> list[dict[str, Any]]:
        """Every metric the run logged: ``name``, ``last_step``, ``last_value``."""
        return list(self._get(f"/api/v1/runs/{run_id}/metrics"))

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's events (config changes, notes), by step."""
        return list(self._get(f"/api/v1/runs/{run_id}/events"))

    def alerts(self, **params: Any) -> list[dict[str, Any]]:
        """The project's alerts (``GET /alerts``; its filters as keyword arguments, e.g.
        ``run=...``, ``state="firing"``)."""
        return list(self._get("/api/v1/alerts", params))

    # --- every stored point -----------------------------------------------------------------

    def history(
        self,
        run_id: str,
        metrics: str | Sequence[str],
        start: int | None = None,
        end: int | None = None,
        segment: int | str = "latest",
    ) -> dict[str, list[Any]]:
        """Every stored point of ``metrics`` in ``[start, end]`` of the run's latest
        lineage: ``{"step": [...], A: [...], ...}``, equal lengths, a row a step where any
        of them is logged, ``None`` where one has no point at that step. Values are exact:
        the float64 the server holds, bit for bit (a float32 logged from JAX as its exact
        float64); NaN and infinities as floats. A glob gives each metric it matches; an
        expression (``rss(grad/norm/layers.*)``) is computed from every stored point. A
        name the run never logged (nor an alias of it), or a glob that matches none of its
        names, raises `ApiError` (404) naming it, with the closest names the run has
        (``error.unknown``, ``error.suggestions``).

        ``"step"`` always holds the steps: a metric named ``step`` is returned under
        ``"step (metric)"``.

        ``segment``: ``"latest"``, or a segment number (`run` lists them) to read the
        history as it was while that segment was the latest: the steps a trainer logged
        before a restart from an earlier checkpoint replaced them."""
        header, rows = self._rows(run_id, metrics, start, end, segment)
        with rows:
            columns: list[list[Any]] = [[] for _ in header]
            for row in rows:
                columns[0].append(int(row[0]))
                for column, cell in zip(columns[1:], row[1:], strict=True):
                    column.append(float(cell) if cell else None)
        return dict(zip(header, columns, strict=True))

    def history_frame(
        self,
        run_id: str,
        metrics: str | Sequence[str],
        start: int | None = None,
        end: int | None = None,
        segment: int | str = "latest",
    ) -> Any:
        """`history` as a pandas DataFrame: a ``step`` column (int64) and a float64 column
        a metric, NaN where a metric has no point at that step (and where it logged NaN).
        A metric named ``step`` is the column ``"step (metric)"``, as in `history`.
        Needs pandas (``pip install 'normwatch[notebook]'``)."""
        try:
            import numpy as np
            import pandas as pd
        except ImportError:
            raise ImportError(
                "history_frame needs pandas: pip install 'normwatch[notebook]' "
                "(or use history(), which needs nothing more)"
            ) from None
        header, rows = self._rows(run_id, metrics, start, end, segment)
        with rows:
            steps = array("q")
            columns = [array("d") for _ in header[1:]]
            nan = float("nan")
            for row in rows:
                steps.append(int(row[0]))
                for column, cell in zip(columns, row[1:], strict=True):
                    column.append(float(cell) if cell else nan)
        data = {"step": np.frombuffer(steps, np.int64)}
        data.update(
            (name, np.frombuffer(column, np.float64))
            for name, column in zip(header[1:], columns, strict=True)
        )
        return pd.DataFrame(data, copy=False)

    def export(
        self,
        run_id: str,
        metrics: str | Sequence[str],
        path: str | os.PathLike[str],
        *,
        start: int | None = None,
        end: int | None = None,
        format: str | None = None,  # noqa: A002 - as the endpoint names it
        segment: int | str = "latest",
    ) -> Path:
        """Write every stored point of ``metrics`` to ``path`` as the server streams it:
        ``csv`` (default), ``jsonl`` or ``parquet`` (the server needs pyarrow), chosen by
        ``format`` or by the file's suffix. Returns the path."""
        target = Path(path)
        kind = format or {".jsonl": "jsonl", ".parquet": "parquet"}.get(target.suffix, "csv")
        params = _export_params(metrics, start, end, segment) | {"format": kind}
        with self._http.stream("GET", f"/api/v1/runs/{run_id}/export", params=params) as r:
            _raise_for(r, "GET", f"/api/v1/runs/{run_id}/export")
            with target.open("wb") as out:
                for part in r.iter_bytes():
                    out.write(part)
        return target

    # --- analyses, as the HTTP API answers them ----------------------------------------------

    def series(
        self,
        run_id: str,
        metrics: str | Sequence[str],
        start: int | None = None,
        end: int | None = None,
        points: int = 1000,
    ) -> list[dict[str, Any]]:
        """Chart reads: each series M4-downsampled to about ``4 * points`` points (a
        bucket's first, last, minimum and maximum kept); `history` for every point."""
        params = {"metric": _names(metrics), "start": start, "end": end, "points": points}
        return list(self._get(f"/api/v1/runs/{run_id}/series", params)["series"])

    def transitions(
        self, run_id: str, metrics: str | Sequence[str], **params: Any
    ) -> dict[str, Any]:
        """Events and detected changes of slope, with each metric's fitted slopes before
        and after (``start``, ``end``, ``window`` as keyword arguments)."""
        return dict(self._get(f"/api/v1/runs/{run_id}/transitions", _with(metrics, params)))

    def spikes(self, run_id: str, metrics: str | Sequence[str], **params: Any) -> dict[str, Any]:
        """Each metric's spikes, the share of steps in them and which metric's spikes lead
        (``start``, ``end``, ``max_lag``, ``threshold`` as keyword arguments)."""
        return dict(self._get(f"/api/v1/runs/{run_id}/spikes", _with(metrics, params)))

    def layers(self, run_id: str, prefix: str = "grad/norm", **params: Any) -> dict[str, Any]:
        """The layer × step grid of a family with its U-index (``start``, ``end``,
        ``points``, ``at``, ``relative_to`` as keyword arguments)."""
        return dict(self._get(f"/api/v1/runs/{run_id}/layers", {"prefix": prefix, **params}))

    def attribution(self, run_id: str, prefix: str = "grad/norm", **params: Any) -> dict[str, Any]:
        """Each group's share of the total's squared norm, per step."""
        path = f"/api/v1/runs/{run_id}/attribution"
        return dict(self._get(path, {"prefix": prefix, **params}))

    def compare(self, run_ids: Sequence[str], metric: str, **params: Any) -> dict[str, Any]:
        """One metric of several runs on one step axis, each summed up."""
        params = {"run": list(run_ids), "metric": metric, **params}
        return dict(self._get("/api/v1/compare", params))

    # --- plumbing ---------------------------------------------------------------------------

    def _get(self, path: str, params: Params | None = None) -> Any:
        response = self._http.get(path, params=_clean(params or {}))
        _raise_for(response, "GET", path)
        return response.json()

    def _rows(
        self,
        run_id: str,
        metrics: str | Sequence[str],
        start: int | None,
        end: int | None,
        segment: int | str,
    ) -> tuple[list[str], _Rows]:
        path = f"/api/v1/runs/{run_id}/export"
        params = _export_params(metrics, start, end, segment) | {"format": "csv"}
        stream = self._http.stream("GET", path, params=params)
        response = stream.__enter__()
        try:
            _raise_for(response, "GET", path)
            reader = csv.reader(_lines(response))
            header = [_unquoted_name(cell) for cell in next(reader)]
        except BaseException:
            stream.__exit__(None, None, None)
            raise
        return header, _Rows(reader, stream)


class _Rows:
    """The rows of a streamed CSV, closing the response when done with."""

    def __init__(self, reader: Iterator[list[str]], stream: Any) -> None:
        self._reader = reader
        self._stream = stream

    def __iter__(self) -> Iterator[list[str]]:
        return self._reader

    def __enter__(self) -> _Rows:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stream.__exit__(None, None, None)


_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "'")
"""The first characters the server's CSV header puts a ``'`` in front of, so that no
spreadsheet takes a metric name for a formula (`services.export_formats.spreadsheet_safe`)."""


def _unquoted_name(cell: str) -> str:
    """The column name a CSV header cell stands for: the ``'`` the server put in front of a
    name starting with one of `_FORMULA_STARTS` taken off."""
    return cell[1:] if cell[:1] == "'" and cell[1:2].startswith(_FORMULA_STARTS) else cell


def _lines(response: httpx.Response) -> Iterator[str]:
    """The body's lines, each with its line feed: a quoted header cell (a metric name) may
    hold a line break, which the CSV reader keeps only if it is given it."""
    rest = ""
    for text in response.iter_text():
        *lines, rest = (rest + text).split("\n")
        for line in lines:
            yield line + "\n"
    if rest:
        yield rest


def _raise_for(response: httpx.Response, method: str, path: str) -> None:
    if response.status_code < 400:
        return
    response.read()
    body: Any = None
    try:
        body = response.json()
        detail = body.get("detail", response.text)
    except (ValueError, AttributeError):
        body, detail = None, response.text
    if not isinstance(detail, str):
        detail = "; ".join(
            f"{'.'.join(str(p) for p in d.get('loc', ())[1:])}: {d.get('msg')}"
            if isinstance(d, dict)
            else str(d)
            for d in (detail if isinstance(detail, list) else [detail])
        )
    raise ApiError(
        response.status_code, detail, method, path, body if isinstance(body, dict) else None
    )


def _names(metrics: str | Sequence[str]) -> list[str]:
    return [metrics] if isinstance(metrics, str) else list(metrics)


def _with(metrics: str | Sequence[str], params: Params) -> dict[str, Any]:
    return {"metric": _names(metrics), **params}


def _export_params(
    metrics: str | Sequence[str], start: int | None, end: int | None, segment: int | str
) -> dict[str, Any]:
    if segment != "latest" and (isinstance(segment, bool) or not isinstance(segment, int)):
        raise ValueError(f'segment is "latest" or a segment number, got {segment!r}')
    chosen = None if segment == "latest" else segment
    return _clean({"metric": _names(metrics), "start": start, "end": end, "segment": chosen})


def _clean(params: Params) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def _with_state(run: dict[str, Any]) -> dict[str, Any]:
    """The run with ``state`` beside the API's ``status`` (the same value)."""
    run.setdefault("state", run.get("status"))
    return run


def _dotted(config: Mapping[str, Any], key: str) -> Any:
    """``config["optimizer"]["lr"]`` for ``"optimizer.lr"`` (or a key holding the dot)."""
    if key in config:
        return config[key]
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _same(found: Any, want: Any) -> bool:
    if found is _MISSING:
        return False
    numbers = (int, float)
    if isinstance(want, numbers) and not isinstance(want, bool):
        return isinstance(found, numbers) and not isinstance(found, bool) and found == want
    return bool(found == want)
