"""The client's inbox of requests from the server: what it takes from batch answers, and
what `should_stop` / `should_checkpoint` say after."""

from __future__ import annotations

import logging
import threading

import pytest

from normwatch.client._control import ControlInbox


def request(id: int, action: str = "checkpoint", **extra: object) -> dict[str, object]:
    return {"id": id, "action": action, "reason": f"r{id}", "source": "admin", "step": 7, **extra}


def test_a_stop_latches_and_checkpoints_are_taken_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="normwatch.client")
    inbox = ControlInbox("exp1")
    assert (inbox.stop, inbox.take_checkpoint(), inbox.read_up_to) == (None, None, 0)

    inbox.receive({"accepted": 3, "control": [request(4), request(5)]})
    taken = inbox.take_checkpoint()
    assert taken is not None and taken.id == 5, "two unread checkpoints are one checkpoint"
    assert inbox.take_checkpoint() is None
    assert inbox.read_up_to == 5

    inbox.receive({"control": [request(5), request(9, "stop")]})  # 5 again: a retried batch
    assert inbox.stop is not None and inbox.stop.reason == "r9"
    inbox.receive({"control": [request(11, "stop", reason="again")]})
    assert inbox.stop.id == 9, "the first stop is the one kept"
    assert [r.id for r in inbox.received] == [4, 5, 9, 11]
    assert inbox.take_checkpoint() is None
    assert [r.getMessage() for r in caplog.records][:1] == [
        "run 'exp1': the server asks the trainer to checkpoint (admin, request 4): r4"
    ]


@pytest.mark.parametrize(
    "answer",
    [
        None,
        "control",
        {"control": None},
        {"control": {"id": 1}},
        {"control": [None, 3, "x"]},
        {"control": [{"id": "1", "action": "stop"}]},
        {"control": [{"id": True, "action": "stop"}]},
        {"control": [{"id": 0, "action": "stop"}]},
        {"control": [{"id": 2, "action": "reboot"}]},
        {"control": [{"action": "stop"}]},
    ],
)
def test_a_malformed_answer_is_ignored(answer: object) -> None:
    inbox = ControlInbox("exp1")
    inbox.receive(answer)
    assert (inbox.stop, inbox.received, inbox.read_up_to) == (None, (), 0)


def test_odd_fields_of_a_good_request_are_read_as_far_as_they_make_sense() -> None:
    inbox = ControlInbox("exp1")
    inbox.receive({"control": [{"id": 3, "action": "stop", "reason": None, "step": "12"}]})
    assert inbox.stop is not None
    assert (inbox.stop.reason, inbox.stop.source, inbox.stop.step) == ("", "", None)


def test_a_checkpoint_arriving_while_the_trainer_takes_one_is_not_lost() -> None:
    inbox = ControlInbox("exp1")
    taken: list[int] = []
    done = threading.Event()

    def trainer() -> None:
        while not done.is_set() or inbox._checkpoint is not None:
            request = inbox.take_checkpoint()
            if request is not None:
                taken.append(request.id)

    thread = threading.Thread(target=trainer)
    thread.start()
    for i in range(1, 2001):
        inbox.receive({"control": [request(i)]})
    done.set()
    thread.join(10)
    assert taken and taken == sorted(taken) and taken[-1] == 2000, "the newest is always taken"
