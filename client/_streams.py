"""Where spooled streams live, how they are found again, and the dead-letter file.

Layout under a spool folder (``Run(spool_dir=...)``, ``$NORMWATCH_SPOOL_DIR`` or
``./normwatch-spool``)::

    <spool dir>/
      <project>.<run name>-<hash>/          one folder per run (project and name)
        deadletter.jsonl                    what the server refused for good, one JSON a line
        <start time ns>-<pid>/              one stream per `Run` that wrote this run
          stream.json, lock, acked, 00000001.nws, ...

Stream folders sort by the time they were started, which is the order they are replayed in.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from ._spool import INFO_FILE

if sys.platform != "win32":
    import fcntl

SPOOL_DIR_ENV = "NORMWATCH_SPOOL_DIR"
DEFAULT_SPOOL_DIR = "normwatch-spool"
DEAD_LETTER_FILE = "deadletter.jsonl"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def default_spool_dir() -> Path:
    """``$NORMWATCH_SPOOL_DIR``, else ``./normwatch-spool``, as an absolute path."""
    return Path(os.path.abspath(os.environ.get(SPOOL_DIR_ENV) or DEFAULT_SPOOL_DIR))


def run_folder(spool_dir: Path, project: str | None, name: str) -> Path:
    """The folder of one run's streams: readable, and unique per (project, name)."""
    digest = hashlib.sha256(f"{project or ''}\0{name}".encode()).hexdigest()[:10]
    readable = f"{_safe(project or '_')}.{_safe(name)}"
    return spool_dir / f"{readable}-{digest}"


def new_stream_dir(folder: Path) -> Path:
    """A fresh stream folder name in ``folder`` (not created); later streams sort after."""
    return folder / f"{time.time_ns():020d}-{os.getpid()}"


def stream_dirs(root: Path) -> list[Path]:
    """Every stream folder at or below ``root`` (a spool dir, a run folder or a stream)."""
    if (root / INFO_FILE).is_file():
        return [root]
    return sorted(path.parent for path in root.glob(f"**/{INFO_FILE}"))


def append_dead_letter(folder: Path, entry: Mapping[str, object]) -> Path:
    """Append ``entry`` as one JSON line to the run folder's dead-letter file, durably.

    Raises `OSError` when the file cannot be written.
    """
    path = folder / DEAD_LETTER_FILE
    folder.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"time": datetime.now(UTC).isoformat(), **entry}) + "\n"
    with path.open("a") as file:
        if sys.platform != "win32":
            # Two processes replaying streams of the same run must not interleave lines.
            fcntl.flock(file.fileno(), fcntl.LOCK_EX)
        file.write(line)
        file.flush()
        os.fsync(file.fileno())
    return path


def remove_if_empty(folder: Path) -> None:
    """Remove a run folder that no stream or dead-letter file is left in."""
    try:
        folder.rmdir()
    except OSError:
        pass  # not empty, or already gone


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("._")[:60] or "_"
