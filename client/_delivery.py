"""Delivering one spooled stream to the server, record by record, in order.

The same code serves a live `Run`, the replay of streams an earlier process left behind,
and ``normwatch sync``. What becomes of a record:

* accepted (2xx) - acknowledged in the spool and forgotten;
* 413 on a batch of several steps - split in two halves by step, each delivered in turn;
* refused for good (any other 4xx but 401, 403, 408, 429) - written to the run folder's
  ``deadletter.jsonl`` with the server's message, logged once, acknowledged;
* 401 or 403 - the token is wrong for this run: delivery stops (``blocked``) and the
  record stays in the spool, for ``normwatch sync`` with a valid token;
* no answer, 408, 429, 5xx - retried with backoff until the caller's time runs out
  (``abandoned``); the record stays in the spool.

The server stores a point once per (run, segment, step, metric), so a record sent again
after a crash (at-least-once delivery) is still stored exactly once. Its answer counts the
points it did not store because their point had a value already (``ignored``, by metric in
``ignored_metrics``): those are reported once a metric, unless the whole record was
ignored and may simply have been delivered before (a retry after an unanswered attempt, a
record tried earlier, any record of a replayed stream), which stores nothing new and is no
news. Batches are spooled without their segment: it is added when they are sent, from the
segment the server gave the stream when the run was created.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ._batch import dumps, gzip_bytes, split_document
from ._control import ControlInbox
from ._reporting import ignored_key
from ._spool import Kind, Spool, SpoolRecord
from ._streams import append_dead_letter
from ._transport import Budget, Delivery, IngestApi, Pause

State = Literal["done", "abandoned", "blocked"]
"""``done``: the record is settled (sent or dead-lettered); otherwise it stays spooled."""

AUTH_STATUS = frozenset({401, 403})

STATUS_RETRIES = 3
"""Retries of the final status update before it is given up with a warning."""

Report = Callable[[str, str], None]
"""Called with a key and a message for problems worth telling the user once."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one record."""

    state: State
    kind: Kind | None = None
    """None for the creation of the run."""
    sent_points: int = 0
    """Points the server stored (or had stored from an earlier delivery of the record)."""
    dead_points: int = 0
    dead_records: int = 0
    message: str = ""
    """For ``blocked``: the server's refusal."""
    ignored_points: int = 0
    """Points the server did not store: their point had a value already."""


@dataclass(slots=True)
class Tally:
    """Totals over delivered records."""

    batches: int = 0
    points: int = 0
    events: int = 0
    dead_records: int = 0
    dead_points: int = 0
    ignored_points: int = 0

    def add(self, outcome: Outcome) -> None:
        if outcome.state != "done":
            return
        sent = outcome.sent_points + outcome.ignored_points
        self.batches += outcome.kind == Kind.METRICS and sent > 0
        self.events += outcome.kind == Kind.EVENT and outcome.dead_records == 0
        self.points += outcome.sent_points
        self.ignored_points += outcome.ignored_points
        self.dead_records += outcome.dead_records
        self.dead_points += outcome.dead_points


def deliver_all(
    delivery: StreamDelivery, tally: Tally, progress: Callable[[], None] | None = None
) -> Outcome:
    """Deliver every pending record of a stream that is no longer written; returns the
    outcome that stopped it, or a ``done`` one when the spool is empty."""
    opened = delivery.open_run()
    if opened.state != "done":
        return opened
    if progress is not None:
        progress()
    while (outcome := delivery.deliver_next()) is not None:
        tally.add(outcome)
        if outcome.state != "done":
            return outcome
        if progress is not None:
            progress()
    return opened


class StreamDelivery:
    """Creates (or finds) the stream's run on the server, then sends its records in order."""

    def __init__(
        self,
        api: IngestApi,
        spool: Spool,
        *,
        dead_letter_folder: Path | None,
        pause: Pause,
        budget: Budget,
        report: Report,
        control: ControlInbox | None = None,
        replay: bool = False,
    ) -> None:
        self._api = api
        self._replay = replay
        """The stream was written by a process that is gone: any record may have reached
        the server already, its answer lost."""
        self._tried: int | None = None
        """The spool sequence number of the last record an attempt was made at."""
        self._control = control
        """Where the server's requests to the trainer go; None for a stream replayed by
        ``normwatch sync``, whose trainer is gone (the requests stay unread for a new one)."""
        self._control_read: Callable[[], int] | None = (
            None if control is None else lambda: control.read_up_to
        )
        self._spool = spool
        self._dead_letter_folder = dead_letter_folder
        self._pause = pause
        self._budget = budget
        self._report = report
        self._refused: str | None = None
        """Why the server refused to create the run: every record is dead-lettered."""
        self.label = f"run {spool.metadata.get('name')!r}"

    @property
    def run_id(self) -> str | None:
        value = self._spool.metadata.get("run_id")
        return value if isinstance(value, str) else None

    @property
    def segment(self) -> int | None:
        value = self._spool.metadata.get("segment")
        return value if isinstance(value, int) else None

    def open_run(self) -> Outcome:
        """Create or resume the run, unless the stream already knows its id and segment."""
        if self.run_id is not None or self._refused is not None:
            return Outcome("done")
        document = self._spool.metadata.get("create") or {}
        delivery = self._api.create_run(dumps(document), pause=self._pause, budget=self._budget)
        if delivery.outcome == "abandoned":
            return Outcome("abandoned")
        if delivery.outcome == "delivered":
            body = delivery.body
            if isinstance(body, dict) and isinstance(body.get("id"), str | int):
                segment = body.get("segment")
                self._spool.update_metadata(
                    run_id=str(body["id"]), segment=segment if isinstance(segment, int) else None
                )
                return Outcome("done")
            delivery = Delivery("rejected", delivery.status_code, message=f"no id in {body!r}")
        message = f"HTTP {delivery.status_code}: {delivery.message}"
        if delivery.status_code in AUTH_STATUS:
            return Outcome("blocked", message=message)
        self._refused = message
        self._report(
            f"create:{message}",
            f"{self.label}: the server refused to create the run ({message}); its data goes "
            f"to {self._dead_letter_folder or 'nowhere (no spool folder)'}",
        )
        return Outcome("done")

    def deliver_next(self) -> Outcome | None:
        """Deliver the oldest pending record; None when nothing is pending."""
        record = self._spool.peek()
        if record is None:
            return None
        if record.kind == Kind.METRICS:
            again = self._replay or self._tried == record.seq
            self._tried = record.seq
            outcome = self._deliver_batch(record.payload, record.points, again)
        elif record.kind == Kind.EVENT:
            outcome = self._deliver_event(record)
        else:
            outcome = self._deliver_status(record)
        if outcome.state == "done" and not self._spool.ack(record.seq):
            # Dropped meanwhile to keep the spool in bounds, and counted as dropped then.
            return Outcome("done", record.kind)
        return outcome

    def _deliver_batch(self, body: bytes, points: int, again: bool = False) -> Outcome:
        """``again``: this record may have reached the server before."""
        if self._refused is not None:
            return self._dead_letter(Kind.METRICS, body, points, self._refused)
        assert self.run_id is not None
        delivery = self._api.post_metrics(
            self.run_id,
            gzip_bytes(with_segment(body, self.segment)),
            pause=self._pause,
            budget=self._budget,
            control_read=self._control_read,
        )
        if delivery.outcome == "delivered":
            if self._control is not None:
                self._control.receive(delivery.body)
            ignored = self._ignored(delivery.body, points, again or delivery.retried)
            return Outcome(
                "done", Kind.METRICS, sent_points=points - ignored, ignored_points=ignored
            )
        if delivery.outcome == "abandoned":
            return Outcome("abandoned", Kind.METRICS)
        message = f"HTTP {delivery.status_code}: {delivery.message}"
        if delivery.status_code in AUTH_STATUS:
            return Outcome("blocked", Kind.METRICS, message=message)
        if delivery.status_code == 413:
            halves = split_document(json.loads(body))
            if halves is not None:
                return self._deliver_halves(halves, again)
        return self._dead_letter(Kind.METRICS, body, points, message)

    def _deliver_halves(
        self, halves: tuple[tuple[dict[str, Any], int], ...], again: bool
    ) -> Outcome:
        sent = dead = dead_records = ignored = 0
        for document, points in halves:
            outcome = self._deliver_batch(dumps(document), points, again)
            if outcome.state != "done":
                return outcome  # the whole record is retried; its first half is idempotent
            sent += outcome.sent_points
            dead += outcome.dead_points
            dead_records += outcome.dead_records
            ignored += outcome.ignored_points
        return Outcome("done", Kind.METRICS, sent, dead, dead_records, ignored_points=ignored)

    def _ignored(self, answer: object, points: int, again: bool) -> int:
        """How many of a delivered batch's ``points`` the server did not store because
        their point had a value already, each metric reported once. A batch all of whose
        points were ignored when it may have been delivered before (``again``) counts as
        stored: the earlier delivery stored it."""
        if not isinstance(answer, dict):
            return 0
        ignored = answer.get("ignored")
        if type(ignored) is not int or not 0 < ignored <= points:
            return 0
        if again and ignored == points:
            return 0
        by_metric = answer.get("ignored_metrics")
        named = by_metric if isinstance(by_metric, dict) else {}
        for name, count in named.items():
            self._report(
                ignored_key(str(name)),
                f"{self.label}: the server already held values of {name!r} at {count} "
                "step(s) it was sent again; the first value of a step stands and later ones "
                "are not stored (a restart from an earlier checkpoint opens a new segment "
                "with Run(..., start_step=<the checkpoint's step>))",
            )
        if sum(c for c in named.values() if type(c) is int) < ignored:  # more than are named
            self._report(
                "ignored:other metrics",
                f"{self.label}: the server did not store {ignored} point(s) of a batch "
                "because those steps had values already; the first value of a step stands",
            )
        return ignored

    def _deliver_event(self, record: SpoolRecord) -> Outcome:
        if self._refused is not None:
            return self._dead_letter(Kind.EVENT, record.payload, 0, self._refused)
        assert self.run_id is not None
        document = json.loads(record.payload)
        if self.segment is not None:
            document["segment"] = self.segment
        delivery = self._api.post_event(
            self.run_id, dumps(document), pause=self._pause, budget=self._budget
        )
        if delivery.outcome == "delivered":
            return Outcome("done", Kind.EVENT)
        if delivery.outcome == "abandoned":
            return Outcome("abandoned", Kind.EVENT)
        message = f"HTTP {delivery.status_code}: {delivery.message}"
        if delivery.status_code in AUTH_STATUS:
            return Outcome("blocked", Kind.EVENT, message=message)
        return self._dead_letter(Kind.EVENT, record.payload, 0, message)

    def _deliver_status(self, record: SpoolRecord) -> Outcome:
        """Best effort: a status is not data, so a few failed tries drop it (with a
        warning) rather than hold back whatever this run or a later one sends next."""
        status = json.loads(record.payload).get("status")
        if self._refused is not None:
            return Outcome("done", Kind.STATUS)
        assert self.run_id is not None
        tries = 0

        def pause(seconds: float) -> bool:
            nonlocal tries
            tries += 1
            return tries <= STATUS_RETRIES and self._pause(seconds)

        delivery = self._api.update_run(
            self.run_id,
            record.payload,
            pause=pause,
            budget=self._budget,
            control_read=self._control_read,
        )
        if delivery.outcome == "delivered":
            return Outcome("done", Kind.STATUS)
        if delivery.outcome == "rejected":
            reason = f"the server refused (HTTP {delivery.status_code}): {delivery.message}"
        elif tries <= STATUS_RETRIES:
            self._report(
                "status",
                f"{self.label}: could not mark the run {status}: no answer in time; "
                "it stays in the spool",
            )
            return Outcome("abandoned", Kind.STATUS)
        else:
            answer = delivery.message or f"HTTP {delivery.status_code}"
            reason = f"no success in {STATUS_RETRIES + 1} tries ({answer})"
        # The run shows as "running" until it goes stale; nothing logged is lost.
        self._report("status", f"{self.label}: could not mark the run {status}: {reason}")
        return Outcome("done", Kind.STATUS)

    def _dead_letter(self, kind: Kind, payload: bytes, points: int, message: str) -> Outcome:
        metadata = self._spool.metadata
        entry = {
            "kind": kind.name.lower(),
            "message": message,
            "project": metadata.get("project"),
            "name": metadata.get("name"),
            "run_id": self.run_id,
            "segment": self.segment,
            "points": points,
            "run": metadata.get("create"),
            "body": json.loads(payload),
        }
        where = "nowhere: there is no spool folder"
        if self._dead_letter_folder is not None:
            try:
                where = str(append_dead_letter(self._dead_letter_folder, entry))
            except OSError as exc:
                where = f"nowhere: the dead-letter file cannot be written ({exc})"
        self._report(
            f"dead:{kind}:{message}",
            f"{self.label}: the server refused a {kind.name.lower()} record of {points} "
            f"points ({message}); written to {where}",
        )
        return Outcome("done", kind, dead_points=points, dead_records=1)


def with_segment(body: bytes, segment: int | None) -> bytes:
    """A spooled batch (a JSON object without ``segment``) with its segment added."""
    if segment is None:
        return body
    if not body.startswith(b"{") or body.startswith(b"{}"):
        raise ValueError(f"expected a non-empty JSON object, got {body[:20]!r}")
    return b'{"segment":%d,%s' % (segment, body[1:])
