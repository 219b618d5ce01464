"""The transactional anomalies of ``flux.chaos.txn_checker`` on hand-made histories: each
detector fires on the history that shows its anomaly, and a clean history is valid."""

from __future__ import annotations

from flux.chaos.checker import check
from flux.chaos.history import History


def _txn(history: History, process: str, writes: list, outcome: str, committed: bool = True):
    invocation = history.invoke(
        process, "txn", {"intent": "commit" if committed else "abort", "writes": writes}
    )
    value = {"committed": committed} if outcome == "ok" else {"error": "x"}
    history.complete(invocation, outcome, value)
    return invocation


def _final(history: History, records: list, stable=((0, 9), (1, 9)), high=((0, 9), (1, 9))):
    invocation = history.invoke("txn-final-reader", "txn-final-read", None)
    history.complete(
        invocation,
        "ok",
        {
            "records": records,
            "stable_offsets": [list(s) for s in stable],
            "high_watermarks": [list(h) for h in high],
        },  # fmt: skip
    )


def _history() -> History:
    """A committed transaction over two partitions, an aborted one, and the log workload's
    minimum (one acknowledged send, a complete final read) so only transactions matter."""
    history = History()
    send = history.invoke("p", "send", {"partition": 0, "value": "s-0", "idempotent": True})
    history.complete(send, "ok", {"partition": 0, "value": "s-0", "idempotent": True, "offset": 0})
    history.append("final-reader", "ok", "assign", {"partitions": [0]})
    history.append("final-reader", "invoke", "poll", None)
    history.append("final-reader", "ok", "poll", {"records": [[0, 0, "s-0"]]})
    final = history.invoke("final-reader", "final-read", None)
    history.complete(final, "ok", {"high_watermarks": [[0, 1]]})
    _txn(history, "t", [[0, "a-1"], [1, "a-2"]], "ok", committed=True)
    _txn(history, "t", [[0, "b-1"], [1, "b-2"]], "ok", committed=False)
    return history


def test_a_clean_transactional_history_is_valid() -> None:
    history = _history()
    history.append("r", "ok", "txn-poll", {"records": [[0, 0, "a-1"]]})
    _final(history, [[0, 0, "a-1"], [1, 0, "a-2"]])
    result = check(history.ops())
    assert result.valid is True, result.anomalies
    assert result.stats["txn-committed"] == 1 and result.stats["txn-aborted"] == 1


def test_each_transactional_anomaly_is_found() -> None:
    history = _history()
    unknown = _txn(history, "t.1", [[0, "c-1"], [1, "c-2"]], "info")
    _txn(history, "t.1", [[0, "d-1"], [1, "d-2"]], "ok", committed=True)
    history.append(
        "r", "ok", "txn-poll",
        {"records": [[0, 1, "b-1"], [0, 2, "c-1"], [0, 3, "a-1"]]},
    )  # fmt: skip
    # Final read: a-1 twice (a duplicate, with the poll's offset 3 too), a-2 lost, d only half.
    _final(
        history,
        [[0, 0, "a-1"], [0, 5, "a-1"], [0, 6, "d-1"]],
        stable=((0, 7), (1, 3)),
        high=((0, 7), (1, 9)),
    )
    result = check(history.ops())
    assert result.valid is False
    names = set(result.anomalies)
    assert names == {
        "txn-aborted-read",  # b-1 of the aborted transaction was read
        "txn-intermediate-read",  # c-1 of the unknown one was read, and is not in the end
        "txn-lost-write",  # a-2 and d-2 of committed transactions are missing
        "txn-duplicate",  # a-1 at offsets 0, 3 and 5
        "txn-non-atomic",  # a and d are half visible
        "txn-hanging",  # partition 1 stays unstable
    }, names
    intermediate = result.anomalies["txn-intermediate-read"].examples[0]
    assert (intermediate["value"], intermediate["txn_op"]) == ("c-1", unknown.index)


def test_without_a_final_read_the_result_is_unknown() -> None:
    history = _history()
    result = check(history.ops())
    assert result.valid == "unknown"
    assert "the transactional final read did not complete" in result.unknown_reasons
