"""What importing a training log can raise, and how importers report lesser problems.

Exceptions::

    ValueError
     └── ImportFormatError       the file is not valid for its format; names file, place, field
    ImportError
     └── MissingDependencyError  the format needs an optional library that is not installed
    RuntimeError
     └── ImportAborted           the server took nothing for too long (unreachable, refused)

Problems that do not stop an import (a text column, a histogram in an event file) are
reported once each through a ``notes`` callback, as one line of text.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

NoteSink = Callable[[str], None]
"""Receives one human-readable line about data an importer skipped or interpreted."""

logger = logging.getLogger("normwatch.client.importers")


class ImportFormatError(ValueError):
    """A file that cannot be read as its format.

    ``source`` is the file, ``where`` the place in it (``"line 12, field 'loss'"``) or None,
    and ``reason`` what is wrong there, with what was expected.
    """

    def __init__(self, source: str | os.PathLike[str], where: str | None, reason: str) -> None:
        self.source = os.fspath(source)
        self.where = where
        self.reason = reason
        place = f"{self.source}, {where}" if where else self.source
        super().__init__(f"{place}: {reason}")


class MissingDependencyError(ImportError):
    """An importer needs a library that only an optional extra installs."""

    def __init__(self, purpose: str, module: str, extra: str) -> None:
        super().__init__(
            f"{purpose} needs the {module!r} package; install it with: "
            f"pip install 'normwatch[{extra}]'",
            name=module,
        )


class ImportAborted(RuntimeError):
    """The import stopped because the server does not take the data."""


class OnceNotes:
    """Forward the first note of each kind to ``sink``; later notes of that kind are dropped.

    A file with a text column on every one of a million rows deserves one note, not a
    million. Without a sink, notes go to the ``normwatch.client.importers`` logger at INFO.
    """

    def __init__(self, sink: NoteSink | None) -> None:
        self._sink = sink
        self._seen: set[str] = set()

    def __call__(self, kind: str, message: str) -> None:
        if kind in self._seen:
            return
        self._seen.add(kind)
        if self._sink is None:
            logger.info("%s", message)
        else:
            self._sink(message)
