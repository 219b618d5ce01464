"""The push delivery window (``DeliveryWindow``, go-back-N sender state): the acknowledged
position moves only over the contiguous acknowledged prefix, a failure stops sending until the
window is settled and rewinds to the first unacknowledged message."""

from __future__ import annotations

import pytest
from flux.cluster.http.push import DeliveryWindow, PushMessage
from hypothesis import given
from hypothesis import strategies as st


def _message(offset: int, message_id: str | None = None) -> PushMessage:
    return PushMessage(offset, message_id or f"m{offset}", f'{{"offset": {offset}}}')


def _send(window: DeliveryWindow, *offsets: int) -> None:
    for offset in offsets:
        assert window.can_send(f"m{offset}", max_in_flight=100)
        window.send(_message(offset), sent_at=0.0, deadline=1.0)


def test_in_order_acknowledgements_move_the_position() -> None:
    window = DeliveryWindow(10)
    _send(window, 10, 11, 12)
    assert (window.position, len(window)) == (10, 3)
    assert window.answer("m10", ok=True) is not None
    assert window.advance() == 1
    assert window.position == 11
    window.answer("m11", ok=True)
    window.answer("m12", ok=True)
    assert window.advance() == 2
    assert (window.position, len(window), window.settled) == (13, 0, True)


def test_an_acknowledgement_never_passes_an_unacknowledged_message() -> None:
    window = DeliveryWindow(0)
    _send(window, 0, 1, 2, 3)
    for message_id in ("m3", "m2", "m1"):
        window.answer(message_id, ok=True)
        assert window.advance() == 0
        assert window.position == 0
    window.answer("m0", ok=True)
    assert window.advance() == 4
    assert window.position == 4


def test_the_window_bounds_messages_past_the_position() -> None:
    window = DeliveryWindow(0)
    window.send(_message(0), sent_at=0.0, deadline=1.0)
    window.send(_message(1), sent_at=0.0, deadline=1.0)
    assert not window.can_send("m2", max_in_flight=2)
    window.answer("m1", ok=True)  # acknowledged, but behind an unacknowledged one
    window.advance()
    assert not window.can_send("m2", max_in_flight=2)
    window.answer("m0", ok=True)
    window.advance()
    assert window.can_send("m2", max_in_flight=2)


def test_a_repeated_id_waits_for_the_answer_to_the_first() -> None:
    window = DeliveryWindow(0)
    window.send(_message(0, "same"), sent_at=0.0, deadline=1.0)
    assert not window.can_send("same", max_in_flight=10)
    assert window.can_send("other", max_in_flight=10)
    window.answer("same", ok=True)
    assert window.can_send("same", max_in_flight=10)


def test_a_nack_in_the_middle_rewinds_to_the_first_unacknowledged_message() -> None:
    window = DeliveryWindow(0)
    _send(window, 0, 1, 2, 3, 4)
    window.answer("m0", ok=True)
    window.answer("m2", ok=False)
    window.answer("m3", ok=True)
    window.advance()
    assert (window.position, window.failed_offset) == (1, 2)
    assert not window.can_send("m5", max_in_flight=100)  # nothing new after a failure
    assert not window.settled
    with pytest.raises(AssertionError):
        window.rewind()  # answers are still outstanding
    window.answer("m1", ok=True)
    window.answer("m4", ok=True)
    assert window.settled
    # Go-back-N: from the failed message on, acknowledged or not, in order.
    assert [m.offset for m in window.rewind()] == [2, 3, 4]
    assert (window.position, window.next_offset, len(window)) == (2, 2, 0)
    assert window.failed_offset is None
    _send(window, 2)


def test_a_broken_connection_fails_every_unanswered_message() -> None:
    window = DeliveryWindow(5)
    _send(window, 5, 6, 7)
    window.answer("m5", ok=True)
    window.answer("m7", ok=True)
    assert window.oldest_unanswered() is not None
    assert window.oldest_unanswered().message.offset == 6  # type: ignore[union-attr]
    window.fail_unanswered()
    assert (window.settled, window.failed_offset) == (True, 6)
    assert window.oldest_unanswered() is None
    assert [m.offset for m in window.rewind()] == [6, 7]
    assert window.position == 6
    assert window.answer("m6", ok=True) is None  # a late answer to a failed message


def test_skip_to_moves_an_empty_window_forward_only() -> None:
    window = DeliveryWindow(3)
    window.skip_to(7)
    assert (window.position, window.next_offset) == (7, 7)
    window.skip_to(5)
    assert window.position == 7
    with pytest.raises(AssertionError):
        window.send(_message(6), sent_at=0.0, deadline=1.0)


@given(
    count=st.integers(1, 30),
    answers=st.lists(st.tuples(st.integers(0, 29), st.booleans()), max_size=60),
)
def test_the_position_is_the_first_unacknowledged_offset(
    count: int, answers: list[tuple[int, bool]]
) -> None:
    window = DeliveryWindow(100)
    _send(window, *range(100, 100 + count))
    acked: set[int] = set()
    failed: set[int] = set()
    for index, ok in answers:
        offset = 100 + index % count
        if window.answer(f"m{offset}", ok=ok) is not None:
            (acked if ok else failed).add(offset)
        window.advance()
        first_unacked = next((o for o in range(100, 100 + count) if o not in acked), 100 + count)
        assert window.position == first_unacked
        if failed:
            assert window.failed_offset == min(failed)
    window.fail_unanswered()
    again = window.rewind() if window.failed_offset is not None else []
    assert [m.offset for m in again] == list(range(window.position, 100 + count))
