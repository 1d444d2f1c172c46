"""A glob rule's group: the messages its metrics' transitions become."""

from __future__ import annotations

import json

from normwatch.server.alerts.evaluation import Transition
from normwatch.server.alerts.grouping import GroupState, advance


def fired(step: int, value: float = 9.0, repeat: int = 0) -> Transition:
    return Transition("firing", step, value, 5.0, value, "x", step, repeat=repeat)


def resolved(step: int) -> Transition:
    return Transition("resolved", step, 1.0, 5.0, 1.0, "y", step)


def told(messages):  # type: ignore[no-untyped-def]
    return [(m.state, m.step, m.firing, m.repeat, m.update) for m in messages]


def test_a_wave_within_group_wait_is_one_message_and_the_last_resolve_another() -> None:
    group = GroupState()
    wave = [(f"l.{i}", fired(100 + i % 3)) for i in range(48)]
    assert told(advance(group, wave, 101, group_wait=3)) == []
    assert group.status == "pending"
    first = advance(group, [], 110, group_wait=3)
    assert told(first) == [("firing", 103, 48, 0, False)]
    assert len(first[0].members) == 48 and first[0].lead == "l.0"
    calm = [(f"l.{i}", resolved(120 + i % 2)) for i in range(48)]
    last = advance(group, calm, 125, group_wait=3)
    assert told(last) == [("resolved", 121, 0, 0, False)]
    assert {m["state"] for m in last[0].members} == {"resolved"} and group.status == "ok"


def test_a_metric_joining_a_firing_group_is_an_update_and_repeats_are_one_a_batch() -> None:
    group = GroupState()
    advance(group, [("a", fired(10))], 10, group_wait=0)
    assert told(advance(group, [("b", fired(20))], 25, group_wait=0)) == [
        ("firing", 25, 2, 0, True)
    ]
    repeats = [("a", fired(30, repeat=1)), ("b", fired(30, repeat=1))]
    assert told(advance(group, repeats, 30, group_wait=0)) == [("firing", 30, 2, 1, False)]
    assert told(advance(group, [("a", resolved(40))], 40, group_wait=0)) == []
    assert told(advance(group, [("b", resolved(41))], 41, group_wait=0)) == [
        ("resolved", 41, 0, 0, False)
    ]


def test_an_episode_over_before_group_wait_is_still_told() -> None:
    group = GroupState()
    got = advance(group, [("a", fired(10)), ("a", resolved(12))], 12, group_wait=50)
    assert told(got) == [("firing", 12, 0, 0, False), ("resolved", 12, 0, 0, False)]


def test_the_group_state_is_a_json_document() -> None:
    group = GroupState()
    advance(group, [("a", fired(10, value=float("inf"))), ("b", fired(10))], 10, group_wait=5)
    doc = json.loads(json.dumps(group.to_dict(), allow_nan=False))
    again = GroupState.from_dict(doc)
    assert again.status == "pending" and again.since == 10 and again.firing() == ["a", "b"]
    assert told(advance(again, [], 15, group_wait=5)) == [("firing", 15, 2, 0, False)]
