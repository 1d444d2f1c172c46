"""Replaying spools from another process: what ``normwatch sync <dir>`` does.

Every stream under the folder is delivered in the order it was started, to the URL it was
recorded with (or the one given), with the given token. A stream whose trainer is still
alive (it holds the stream's lock) is left to that trainer. Delivery stops at the first
stream that cannot get through - the server stays unreachable for ``retry_for`` seconds,
or refuses the token - and everything not delivered stays in the spool, untouched.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ._delivery import StreamDelivery, Tally, deliver_all
from ._reporting import WarnOnce
from ._spool import Spool, SpoolBusy
from ._streams import default_spool_dir, remove_if_empty, stream_dirs
from ._transport import IngestApi


@dataclass
class SyncReport:
    """What a `sync_spool` call did."""

    tally: Tally = field(default_factory=Tally)
    streams: int = 0
    """Streams found."""
    delivered: int = 0
    """Streams delivered completely and removed."""
    busy: list[Path] = field(default_factory=list)
    """Streams skipped because a live trainer still writes them."""
    unreadable: list[tuple[Path, str]] = field(default_factory=list)
    """Streams skipped because they could not be read, with the reason."""
    failure: str | None = None
    """Why delivery stopped early; None when every stream not busy was delivered."""
    corrupt_records: int = 0
    """Damaged records skipped (a torn last record of a killed trainer counts here)."""

    @property
    def ok(self) -> bool:
        """True when nothing is left undelivered or dead-lettered (busy streams aside)."""
        return self.failure is None and not self.unreadable and self.tally.dead_records == 0


class _OutageClock:
    """Retry pauses for a one-shot command: give up once one record has failed for
    ``retry_for`` seconds in a row."""

    def __init__(self, retry_for: float, timeout: float) -> None:
        self.retry_for = retry_for
        self._timeout = timeout
        self._failing_since: float | None = None

    def success(self) -> None:
        self._failing_since = None

    def pause(self, seconds: float) -> bool:
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        if now + seconds - self._failing_since > self.retry_for:
            return False
        time.sleep(seconds)
        return True

    def budget(self) -> float:
        return self._timeout


def sync_spool(
    root: Path | None = None,
    *,
    token: str,
    url: str | None = None,
    retry_for: float = 30.0,
    timeout: float = 10.0,
    transport: httpx.BaseTransport | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> SyncReport:
    """Deliver every spooled stream at or below ``root`` (default: the spool folder a `Run`
    uses by default); see the module docstring.

    ``url`` overrides the server each stream recorded. ``progress`` receives one line per
    stream and, on long streams, one every few seconds.
    """
    report = SyncReport()
    directories = stream_dirs(root if root is not None else default_spool_dir())
    report.streams = len(directories)
    clock = _OutageClock(retry_for, timeout)
    apis: dict[str, IngestApi] = {}
    try:
        for directory in directories:
            try:
                spool = Spool.open(directory)
            except SpoolBusy:
                report.busy.append(directory)
                progress(f"{directory}: skipped, a running trainer is still writing it")
                continue
            except FileNotFoundError:
                continue  # delivered by someone else meanwhile
            except (OSError, ValueError) as exc:
                report.unreadable.append((directory, str(exc)))
                progress(f"{directory}: skipped, cannot be read: {exc}")
                continue
            report.corrupt_records += spool.corrupt_records
            target = url or str(spool.metadata.get("url") or "")
            if not target:
                spool.close()
                report.failure = f"{directory}: no server URL recorded; pass --url"
                return report
            api = apis.get(target)
            if api is None:
                api = apis[target] = IngestApi(
                    target, token=token, timeout=timeout, transport=transport
                )
            if not _sync_stream(spool, api, clock, target, report, progress):
                return report
            report.delivered += 1
            remove_if_empty(directory.parent)
    finally:
        for api in apis.values():
            api.close()
    return report


def _sync_stream(
    spool: Spool,
    api: IngestApi,
    clock: _OutageClock,
    url: str,
    report: SyncReport,
    progress: Callable[[str], None],
) -> bool:
    """Deliver one stream; True when it was delivered and removed."""
    metadata = spool.metadata
    label = f"{metadata.get('project') or '(token project)'}/{metadata.get('name')}"
    assert spool.directory is not None
    progress(
        f"{label} ({spool.directory.name}): {spool.pending_records} records, "
        f"{spool.pending_points} points to {url}"
    )
    delivery = StreamDelivery(
        api,
        spool,
        dead_letter_folder=spool.directory.parent,
        pause=clock.pause,
        budget=clock.budget,
        report=WarnOnce(),
        replay=True,
    )
    tally = Tally()
    last_report = time.monotonic()

    def advanced() -> None:
        nonlocal last_report
        clock.success()
        if time.monotonic() - last_report > 5.0:
            last_report = time.monotonic()
            progress(f"  {tally.points} points sent, {spool.pending_records} records left")

    try:
        outcome = deliver_all(delivery, tally, advanced)
    finally:
        _merge(report.tally, tally)
    if outcome.state == "done":
        spool.destroy()
        progress(
            f"  done: {tally.batches} batches, {tally.points} points, {tally.events} events; "
            f"{tally.dead_records} dead-lettered"
            + (
                f"; {tally.ignored_points} points not stored (their steps had values already)"
                if tally.ignored_points
                else ""
            )
        )
        return True
    spool.close()
    if outcome.state == "blocked":
        report.failure = f"the server at {url} refused the token ({outcome.message})"
    else:
        report.failure = (
            f"the server at {url} did not take the data for {clock.retry_for:g} s "
            "(unreachable, or answering 5xx/429)"
        )
    return False


def _merge(total: Tally, part: Tally) -> None:
    total.batches += part.batches
    total.points += part.points
    total.events += part.events
    total.dead_records += part.dead_records
    total.dead_points += part.dead_points
    total.ignored_points += part.ignored_points
