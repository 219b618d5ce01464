"""The pure parts of ``flux.sdk.table``: how one record changes a table, and the argument checks
that fail before any network call (the bootstrap address is never contacted)."""

from __future__ import annotations

import asyncio

import pytest
from flux.sdk import AsyncTableView, ConfigurationError, TableViewError
from flux.sdk.table import _apply_record

NOBODY = "127.0.0.1:1"


def test_a_value_sets_the_key_and_reports_the_old_value() -> None:
    table: dict[object, object] = {}
    assert _apply_record(table, b"k", b"v1") == (b"k", None, b"v1")
    assert _apply_record(table, b"k", b"v2") == (b"k", b"v1", b"v2")
    assert table == {b"k": b"v2"}


def test_an_equal_value_is_no_change() -> None:
    table: dict[object, object] = {b"k": b"v"}
    assert _apply_record(table, b"k", b"v") is None
    assert table == {b"k": b"v"}


def test_a_tombstone_deletes_the_key_and_an_absent_key_is_no_change() -> None:
    table: dict[object, object] = {b"k": b"v", b"other": b"w"}
    assert _apply_record(table, b"k", None) == (b"k", b"v", None)
    assert _apply_record(table, b"k", None) is None
    assert _apply_record(table, b"never", None) is None
    assert table == {b"other": b"w"}


def test_values_are_deserialized_but_tombstones_are_not() -> None:
    seen: list[bytes] = []

    def as_int(data: bytes) -> int:
        seen.append(data)
        return int(data)

    table: dict[object, object] = {}
    assert _apply_record(table, "n", b"7", deserialize=as_int) == ("n", None, 7)
    assert _apply_record(table, "n", None, deserialize=as_int) == ("n", 7, None)
    assert seen == [b"7"]


def test_max_keys_bounds_new_keys_only() -> None:
    table: dict[object, object] = {b"a": b"1", b"b": b"2"}
    assert _apply_record(table, b"a", b"9", max_keys=2) == (b"a", b"1", b"9")
    with pytest.raises(TableViewError, match="max_keys=2"):
        _apply_record(table, b"c", b"3", max_keys=2)
    assert table == {b"a": b"9", b"b": b"2"}  # unchanged by the refused record


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"max_keys": 0}, "max_keys"),
        ({"metadata_refresh_interval_ms": 1}, "metadata_refresh_interval_ms"),
        ({"on_change": "print"}, "on_change"),
        ({"key_deserializer": 3}, "key_deserializer"),
        ({"fetch_max_wait_ms": -1}, "fetch_max_wait_ms"),
    ],
)
def test_bad_arguments_fail_at_construction(options: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        AsyncTableView(NOBODY, "t", **options)  # type: ignore[arg-type]


def test_a_topic_name_is_required() -> None:
    with pytest.raises(ConfigurationError, match="topic"):
        AsyncTableView(NOBODY, "")


def test_reading_before_start_is_an_error_not_an_empty_table() -> None:
    async def scenario() -> None:
        view = AsyncTableView(NOBODY, "t")
        with pytest.raises(ConfigurationError, match="not started"):
            view.get(b"k")
        with pytest.raises(ConfigurationError, match="not started"):
            len(view)
        with pytest.raises(ConfigurationError, match="timeout_s"):
            await view.wait_caught_up(timeout_s=0)
        await view.close()
        with pytest.raises(ConfigurationError, match="closed"):
            await view.start()

    asyncio.run(scenario())
