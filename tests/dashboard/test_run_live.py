"""The run page's pace: beats handed on once whatever the interval, the interval it asks
for (told by the server or not, hidden or not), pokes taken once, a tab shown again, and
stores from the browser taken only as written."""

from __future__ import annotations

import doctest
from dataclasses import replace
from typing import Any

import pytest

from normwatch.dashboard.pages import run_live
from normwatch.dashboard.pages.run_live import (
    MAX_BEATS,
    PUSHED_MS,
    TICK_MS,
    Pace,
    Poke,
    interval_for,
)


def test_each_beat_is_handed_on_once_at_either_interval() -> None:
    pace, handed = Pace(), []
    for n in range(1, 11):
        turn = pace.advance(n)
        pace, handed = turn.pace, handed + list(turn.beats)
    assert handed == list(range(1, 11)) and pace.ms == 10 * TICK_MS
    # Two five-second ticks hand on ten beats, then a second's tick one more.
    turn = replace(pace, every=PUSHED_MS).advance(12)
    assert list(turn.beats) == list(range(11, 21)) and turn.pace.ms == 20 * TICK_MS
    assert list(replace(turn.pace, every=TICK_MS).advance(13).beats) == [21]


def test_a_call_that_is_no_tick_hands_on_no_beat() -> None:
    pace = Pace().advance(5).pace
    for count in (5, 4, None, "5", True):  # a poke, a count gone back, crafted ones
        turn = pace.advance(count)
        assert (list(turn.beats), turn.pace.ms, turn.pace.n) == ([], pace.ms, 5)
        assert (turn.redraw, turn.shown, turn.pace.seq) == (False, False, pace.seq + 1)


def test_a_page_frozen_for_long_catches_up_once() -> None:
    assert list(Pace().advance(3600).beats) == list(range(3600 - MAX_BEATS + 1, 3601))


def test_the_channel_or_a_hidden_tab_stretches_the_interval() -> None:
    assert interval_for(Poke()) == TICK_MS
    assert interval_for(Poke(1, open=True)) == PUSHED_MS
    assert interval_for(Poke(2)) == TICK_MS  # it closed: look again every second
    assert interval_for(Poke(3, hidden=True)) == PUSHED_MS  # and rest while hidden


def test_a_poke_is_taken_once() -> None:
    turn = Pace().advance(0, poke=Poke(1, open=True))
    assert not turn.redraw  # the channel opened: nothing changed
    turn = turn.pace.advance(0, poke=Poke(2, open=True, changed=True))
    assert turn.redraw and turn.pace.pokes == 2
    turn = turn.pace.advance(1, poke=Poke(2, open=True, changed=True))
    assert not turn.redraw  # the interval's tick, with the poke already taken


def test_a_tab_shown_again_redraws_and_catches_up() -> None:
    hidden = Pace().advance(0, poke=Poke(1, open=True, hidden=True))
    assert hidden.pace.hidden and not (hidden.redraw or hidden.shown)
    again = hidden.pace.advance(0, poke=Poke(1, open=True, hidden=True))
    assert again.pace.hidden and not again.shown
    shown = again.pace.advance(0, poke=Poke(2, open=True, changed=True))
    assert (shown.redraw, shown.shown, shown.pace.hidden) == (True, True, False)
    # A change told while it shows is no showing.
    told = shown.pace.advance(0, poke=Poke(3, open=True, changed=True))
    assert told.redraw and not told.shown


@pytest.mark.parametrize(
    "store",
    [
        None,
        "x",
        [1, 2, 3],
        {"n": 1},
        {"n": "1", "ms": 0, "every": 1000, "pokes": 0, "seq": 0},
        {"n": 1, "ms": 0, "every": 7, "pokes": 0, "seq": 0},
        {"n": 1, "ms": 0, "every": 1000, "pokes": 0, "seq": True},
        {"n": 1, "ms": 0.5, "every": 1000, "pokes": 0, "seq": 0, "hidden": False},
        {"n": 1, "ms": 0, "every": 1000, "pokes": 0, "seq": 0, "hidden": 0},
    ],
)
def test_a_store_it_did_not_write_is_a_first_pace(store: Any) -> None:
    assert Pace.from_store(store) == Pace()


def test_a_store_it_wrote_is_read_back() -> None:
    pace = Pace(7, 27_000, PUSHED_MS, 4, True, 9)
    assert Pace.from_store(pace.to_store()) == pace


@pytest.mark.parametrize(
    ("store", "poke"),
    [
        ({"n": 3, "on": True, "changed": True, "hidden": False}, Poke(3, True, True)),
        ({"n": 3, "on": False, "changed": False, "hidden": True}, Poke(3, hidden=True)),
        ({"n": "3", "on": True, "changed": True, "hidden": False}, Poke()),
        ({"n": 3, "on": 1, "changed": True, "hidden": False}, Poke()),
        ({"n": 3, "on": True, "changed": True}, Poke()),
        ({"n": 3}, Poke()),
        (None, Poke()),
        ([3, True, True], Poke()),
    ],
)
def test_pokes_are_taken_only_as_the_script_writes_them(store: Any, poke: Poke) -> None:
    assert Poke.from_store(store) == poke


def test_doctests() -> None:
    failed, tried = doctest.testmod(run_live)
    assert tried and not failed
