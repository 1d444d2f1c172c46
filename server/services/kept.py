"""Answers kept for as long as a run's data stays the same.

A run page asks the same questions again and again: each page load and each refresh reads
its layer grid, its attribution, its transitions and the spikes of its metrics, every one a
read of up to a hundred series over the whole run, and a finished run's answers never
change. So an answer is kept under the run's data version
(`normwatch.server.storage.versions`) and what was asked (the function and its
arguments): a batch stored for the run, or a compaction of it, makes a new version, and
the next question is answered anew. Answers no one asks for again fall out, least recently
used first, past `MAX_KEPT_BYTES`, and nothing is kept past `KEEP_S`: the one change of the
points that makes no new version, retention dropping the point data of a run quiet for
days, shows within that.

Kept answers are shared by every caller: they must not be changed.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from ..storage.versions import DataVersion

__all__ = ["KEEP_S", "MAX_KEPT_BYTES", "forget", "kept"]

MAX_KEPT_BYTES = 96 * 2**20
"""Memory the kept answers may take, all runs together (as estimated by their callers)."""
KEEP_S = 900.0
"""Seconds an answer is kept at most."""

T = TypeVar("T")
Key = tuple[DataVersion, Hashable]


class _Kept:
    """Answers by (version, question), least recently used dropped first once they take
    more than their byte limit. Thread-safe."""

    def __init__(self, limit: int) -> None:
        self._answers: OrderedDict[Key, tuple[float, int, Any]] = OrderedDict()
        self._bytes = 0
        self._limit = limit
        self._lock = threading.Lock()

    def get(self, key: Key) -> tuple[bool, Any]:
        with self._lock:
            entry = self._answers.get(key)
            if entry is None:
                return False, None
            found_at, size, answer = entry
            if time.monotonic() - found_at > KEEP_S:
                del self._answers[key]
                self._bytes -= size
                return False, None
            self._answers.move_to_end(key)
            return True, answer

    def put(self, key: Key, answer: Any, size: int) -> None:
        with self._lock:
            if key in self._answers or size > self._limit:
                return
            self._answers[key] = (time.monotonic(), size, answer)
            self._bytes += size
            while self._bytes > self._limit:
                _, (_, dropped, _) = self._answers.popitem(last=False)
                self._bytes -= dropped

    def clear(self) -> None:
        with self._lock:
            self._answers.clear()
            self._bytes = 0


_kept = _Kept(MAX_KEPT_BYTES)


def kept(
    version: DataVersion | None,
    question: Hashable,
    answer: Callable[[], T],
    nbytes: Callable[[T], int],
) -> T:
    """``answer()``, or the answer kept for ``question`` at ``version``; a new answer is kept
    (``nbytes`` its size). With no version (no such run), ``answer()`` every time.

    Two callers asking at once may both compute it; either answer is the same.
    """
    if version is None:
        return answer()
    key = (version, question)
    found, value = _kept.get(key)
    if found:
        return value  # type: ignore[no-any-return]
    value = answer()
    _kept.put(key, value, nbytes(value))
    return value


def forget() -> None:
    """Drop every kept answer (for tests that compare a kept answer with a fresh one)."""
    _kept.clear()
