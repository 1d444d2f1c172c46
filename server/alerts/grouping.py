"""One conversation a rule and run: the transitions of a glob rule's metrics, as the few
messages an on-call person wants.

A rule over ``grad/norm/layers.*`` watches 48 series; a spike through the whole model is
48 firings and 48 resolves. Grouped, it is one firing message listing the metrics (sent
once the first has fired and ``group_wait`` more steps have passed, so a wave that
arrives over a few steps is one message), an update when more metrics join while it
fires, the rule's repeats while any still fires, and one resolved message when the last
has resolved. The per-metric transitions stay in the history; only the group's messages
are sent. The rule's ``repeat_every_seconds`` is the group's too: the clock sends one repeat
for the group once its last firing message is that old (see `services.repeats`).

Pure functions over transitions; the storing layer keeps one :class:`GroupState` per
(rule, run) beside the per-metric states.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .evaluation import Transition

__all__ = ["GroupMessage", "GroupState", "Member", "advance"]

MAX_MEMBERS = 4096
"""Members a group document keeps (a glob over every parameter of a large model)."""


@dataclass
class Member:
    state: Literal["firing", "resolved"]
    step: int
    value: float

    def to_dict(self, metric: str) -> dict[str, Any]:
        value: float | str = self.value
        if math.isnan(self.value):
            value = "NaN"
        elif math.isinf(self.value):
            value = "Infinity" if self.value > 0 else "-Infinity"
        return {"metric": metric, "state": self.state, "step": self.step, "value": value}


@dataclass
class GroupState:
    """``ok`` (nothing firing), ``pending`` (firing, its first message waiting for
    ``group_wait``) or ``firing`` (told); the members of the current episode."""

    status: Literal["ok", "pending", "firing"] = "ok"
    members: dict[str, Member] = field(default_factory=dict)
    since: int | None = None
    """The step the episode's first member fired."""
    told: list[str] = field(default_factory=list)
    """The firing members the last firing message listed."""
    fired_at: int | None = None
    """The step of the episode's first message."""
    repeats: int = 0
    notified_unix: float | None = None
    """The wall time (Unix seconds) of the last firing message (first, update or repeat);
    None where it is not known (a state stored before it was kept)."""

    def firing(self) -> list[str]:
        return sorted(m for m, member in self.members.items() if member.state == "firing")

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": 2,
            "status": self.status,
            "members": {m: member.to_dict(m) for m, member in self.members.items()},
            "since": self.since,
            "told": self.told,
            "fired_at": self.fired_at,
            "repeats": self.repeats,
            "notified_unix": self.notified_unix,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> GroupState:
        """Inverse of :meth:`to_dict`; a version 1 document has no ``notified_unix``."""
        notified = doc.get("notified_unix")
        members = {
            str(m): Member(d["state"], int(d["step"]), float(d["value"]))
            for m, d in dict(doc.get("members") or {}).items()
        }
        return cls(
            status=doc.get("status", "ok"),
            members=members,
            since=doc.get("since"),
            told=list(doc.get("told") or []),
            fired_at=doc.get("fired_at"),
            repeats=int(doc.get("repeats") or 0),
            notified_unix=None if notified is None else float(notified),
        )


@dataclass(frozen=True)
class GroupMessage:
    """One message about a group: ``firing`` (the first, an update when more joined, or a
    repeat) or ``resolved``, at ``step``, listing the episode's members."""

    state: Literal["firing", "resolved"]
    step: int
    members: list[dict[str, Any]]
    firing: int
    """How many members fire at ``step``."""
    lead: str
    """The member whose value the message reports (the first to fire)."""
    value: float
    threshold: float | None
    reason: str
    fired_at_step: int
    repeat: int = 0
    update: bool = False


def advance(
    group: GroupState,
    events: Sequence[tuple[str, Transition]],
    last_step: int,
    group_wait: int,
    *,
    now_unix: float | None = None,
) -> list[GroupMessage]:
    """Feed one batch's per-metric transitions (any order) and the batch's last step;
    mutates ``group`` and returns the messages to send. ``now_unix`` (when they came) is
    the group's ``notified_unix`` once a firing message goes out."""
    out: list[GroupMessage] = []
    threshold: float | None = None
    repeat_due = False
    by_step: dict[int, list[tuple[str, Transition]]] = {}
    for metric, t in events:
        by_step.setdefault(t.step, []).append((metric, t))
    # A step's transitions are taken together: metrics that fire at the same step are one
    # message, whatever order their columns came in.
    for step in sorted(by_step):
        if group.status == "pending" and group.since is not None:
            due = group.since + group_wait
            if step > due:  # it came due between transitions: told as of then
                out.append(_firing(group, due, threshold))
        for metric, t in sorted(by_step[step], key=lambda e: (e[1].repeat, e[0])):
            threshold = t.threshold if t.threshold is not None else threshold
            if t.state == "firing" and t.repeat:
                repeat_due = repeat_due or group.status == "firing"
                continue
            if t.state == "firing":
                if group.status == "ok":
                    group.status, group.since, group.members = "pending", t.step, {}
                    group.told, group.fired_at, group.repeats = [], None, 0
                if len(group.members) < MAX_MEMBERS or metric in group.members:
                    group.members[metric] = Member("firing", t.step, t.value)
            elif metric in group.members:
                group.members[metric] = Member("resolved", t.step, t.value)
        if group.status == "pending" and group.since is not None:
            if step >= group.since + group_wait or not group.firing():
                out.append(_firing(group, step, threshold))
        if group.status == "firing" and not group.firing():
            out.append(_resolved(group, step, threshold))
    if group.status == "pending" and group.since is not None:
        if last_step >= group.since + group_wait:
            out.append(_firing(group, group.since + group_wait, threshold))
    elif group.status == "firing":
        joined = set(group.firing()) - set(group.told)
        if joined:
            out.append(_firing(group, last_step, threshold, update=True))
        elif repeat_due:
            group.repeats += 1
            out.append(_firing(group, last_step, threshold, repeat=group.repeats))
    if now_unix is not None and group.status == "firing" and out and out[-1].state == "firing":
        group.notified_unix = now_unix
    return out


def _members(group: GroupState) -> list[dict[str, Any]]:
    return [group.members[m].to_dict(m) for m in sorted(group.members)]


def _lead(group: GroupState) -> str:
    return min(group.members, key=lambda m: (group.members[m].step, m))


def _firing(
    group: GroupState,
    step: int,
    threshold: float | None,
    *,
    update: bool = False,
    repeat: int = 0,
) -> GroupMessage:
    firing = group.firing()
    lead = _lead(group)
    if group.fired_at is None:
        group.fired_at = step
    group.status, group.told = "firing", firing
    shown = ", ".join(firing[:5]) + (f" and {len(firing) - 5} more" if len(firing) > 5 else "")
    if update:
        reason = f"{len(firing)} metrics firing now: {shown}"
    elif repeat:
        reason = f"still firing since step {group.fired_at:,}: {shown}"
    else:
        reason = f"{len(firing) or len(group.members)} metric(s) firing: {shown or lead}"
    return GroupMessage(
        "firing",
        step,
        _members(group),
        len(firing),
        lead,
        group.members[lead].value,
        threshold,
        reason,
        group.fired_at,
        repeat=repeat,
        update=update,
    )


def _resolved(group: GroupState, step: int, threshold: float | None) -> GroupMessage:
    lead = _lead(group)
    members = _members(group)
    fired_at = group.fired_at if group.fired_at is not None else step
    message = GroupMessage(
        "resolved",
        step,
        members,
        0,
        lead,
        group.members[lead].value,
        threshold,
        f"all {len(members)} metric(s) resolved",
        fired_at,
    )
    group.status, group.members, group.since = "ok", {}, None
    group.told, group.fired_at, group.repeats = [], None, 0
    group.notified_unix = None
    return message
