"""The importers' progress bar: redrawn in place on a terminal, plain lines elsewhere."""

from __future__ import annotations

import io

from normwatch.client.importers import ProgressBar


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_bar_redraws_in_place_with_rate_and_eta() -> None:
    stream, clock = io.StringIO(), FakeClock()
    bar = ProgressBar("gpt2", stream=stream, live=True, clock=clock, columns=120)
    clock.now += 2.0
    bar.update(5_000, total=20_000)
    clock.now += 0.05
    bar.update(5_050, total=20_000)  # within the redraw interval: not drawn
    bar.note("skipped column 'run_state'")  # redraws the bar below the note
    clock.now += 2.0
    bar.update(10_000, total=20_000, status="sending: 1,024 values waiting")
    bar.close()

    first = "gpt2 [#####---------------]  25% 5,000/20,000 steps  2,500 steps/s  ETA 0:06"
    sending = (
        "gpt2 [##########----------]  50% 10,000/20,000 steps  2,469 steps/s  ETA 0:04"
        "  (sending: 1,024 values waiting)"
    )
    final = "gpt2: 10,000 steps in 0:04  2,469 steps/s"
    assert stream.getvalue().split("\r") == [
        "",
        first,
        " " * len(first),
        "note: skipped column 'run_state'\n",
        "gpt2 [#####---------------]  25% 5,050/20,000 steps  2,463 steps/s  ETA 0:06",
        sending,
        final + " " * (len(sending) - len(final)) + "\n",
    ]
    narrow = io.StringIO()
    cut = ProgressBar("gpt2", stream=narrow, live=True, clock=clock, columns=40)
    cut.update(1, total=2)
    assert narrow.getvalue() == "\r" + "gpt2 [##########----------]  50% 1/2 steps"[:39]


def test_progress_bar_writes_plain_lines_when_not_on_a_terminal() -> None:
    stream, clock = io.StringIO(), FakeClock()
    bar = ProgressBar("run", unit="rows", stream=stream, clock=clock, line_interval=10.0)
    for _ in range(30):
        clock.now += 1.0
        bar.update(int(clock.now - 100) * 10)
    bar.close()
    assert stream.getvalue().splitlines() == [
        "run: 10 rows  10 rows/s",
        "run: 110 rows  10 rows/s",
        "run: 210 rows  10 rows/s",
        "run: 300 rows in 0:30  10 rows/s",
    ]
