"""``fluxctl group`` and ``fluxctl consume --group`` / ``produce --key-separator`` against a
real node: lag equals the high watermark minus the committed offset, consumption resumes where
the group stopped, offsets reset to the log start, groups are listed and deleted."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner, Result
from flux.cli.client_commands import consume, produce
from flux.cli.group import group
from flux.cli.topic import topic
from flux.protocol.partitioner import partition_for_key
from flux.sdk import Admin, GroupConsumer

pytestmark = pytest.mark.integration

MESSAGES = 40
CONSUMED_FIRST = 15


@click.group()
def fluxctl() -> None:
    """Stand-in for ``flux.cli.main.main``."""


for command in (topic, produce, consume, group):
    fluxctl.add_command(command)


def run(*args: str, bootstrap: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(fluxctl, [*args, "--bootstrap", bootstrap], input=stdin)


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result


def _json_lines(result: Result) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_group_commands_and_group_consumption(node_factory) -> None:
    node = node_factory(broker={"group_initial_rebalance_delay_ms": 0})
    bootstrap = node.bootstrap_servers
    ok(run("topic", "create", "events", "--partitions", "4", bootstrap=bootstrap))
    lines = "".join(f"k{i}:v{i}\n" for i in range(MESSAGES))
    sent = _json_lines(
        ok(
            run(
                "produce", "events", "--key-separator", ":", "--idempotent", "--json",
                bootstrap=bootstrap, stdin=lines,
            )
        )
    )  # fmt: skip
    assert [s["partition"] for s in sent] == [
        partition_for_key(f"k{i}".encode(), 4) for i in range(MESSAGES)
    ]

    first = _json_lines(
        ok(
            run(
                "consume", "events", "--group", "readers", "--from-beginning",
                "--max-messages", str(CONSUMED_FIRST), "--json", bootstrap=bootstrap,
            )
        )
    )  # fmt: skip
    assert len(first) == CONSUMED_FIRST
    assert all(r["key"] == "k" + r["value"][1:] for r in first)

    # Lag, computed independently: high watermark (from the produce answers) minus committed
    # (one past the last offset printed per partition; 0 where nothing was printed).
    high_watermarks = {p: sum(1 for s in sent if s["partition"] == p) for p in range(4)}
    committed = {p: 0 for p in range(4)}
    for record in first:
        committed[record["partition"]] = max(committed[record["partition"]], record["offset"] + 1)
    described = json.loads(
        ok(run("group", "describe", "readers", "--json", bootstrap=bootstrap)).stdout
    )
    assert described["state"] == "Empty" and described["members"] == []
    rows = {row["partition"]: row for row in described["partitions"]}
    assert set(rows) == set(range(4))
    for partition, row in rows.items():
        assert row["topic"] == "events"
        assert row["committed_offset"] == committed[partition]
        assert row["high_watermark"] == high_watermarks[partition]
        assert row["lag"] == high_watermarks[partition] - committed[partition]
    assert sum(row["lag"] for row in rows.values()) == MESSAGES - CONSUMED_FIRST
    table = ok(run("group", "describe", "readers", bootstrap=bootstrap)).stdout
    assert "lag" in table and "no active members" in table

    listed = json.loads(ok(run("group", "list", "--json", bootstrap=bootstrap)).stdout)
    assert {"group_id": "readers", "protocol_type": "consumer", "state": "Empty"} in listed[
        "groups"
    ]

    # consume --group goes on where the group stopped: together, every record exactly once.
    rest = _json_lines(
        ok(
            run(
                "consume", "events", "--group", "readers", "--idle-timeout", "1", "--json",
                bootstrap=bootstrap,
            )
        )
    )  # fmt: skip
    assert sorted(r["value"] for r in first + rest) == sorted(f"v{i}" for i in range(MESSAGES))
    described = json.loads(
        ok(run("group", "describe", "readers", "--json", bootstrap=bootstrap)).stdout
    )
    assert all(row["lag"] == 0 for row in described["partitions"])

    reset = json.loads(
        ok(
            run(
                "group", "reset-offsets", "readers", "--topic", "events", "--to-earliest",
                "--json", bootstrap=bootstrap,
            )
        ).stdout
    )  # fmt: skip
    assert reset["offsets"] == {str(p): 0 for p in range(4)}
    described = json.loads(
        ok(run("group", "describe", "readers", "--json", bootstrap=bootstrap)).stdout
    )
    assert {row["partition"]: row["committed_offset"] for row in described["partitions"]} == {
        p: 0 for p in range(4)
    }
    assert sum(row["lag"] for row in described["partitions"]) == MESSAGES

    ok(run("group", "delete", "readers", bootstrap=bootstrap))
    listed = json.loads(ok(run("group", "list", "--json", bootstrap=bootstrap)).stdout)
    assert "readers" not in {g["group_id"] for g in listed["groups"]}


def test_group_commands_refuse_a_group_with_members(node_factory) -> None:
    node = node_factory(broker={"group_initial_rebalance_delay_ms": 0})
    bootstrap = node.bootstrap_servers
    with Admin(bootstrap) as admin:
        admin.create_topic("busy", partitions=1, replication_factor=1)
    with GroupConsumer(bootstrap, "busy-group", topics=["busy"], client_id="worker-7") as member:
        member.poll(0.1)
        described = json.loads(
            ok(run("group", "describe", "busy-group", "--json", bootstrap=bootstrap)).stdout
        )
        assert described["state"] == "Stable"
        assert [m["client_id"] for m in described["members"]] == ["worker-7"]
        assert described["partitions"][0]["client_id"] == "worker-7"
        for args in (
            ("group", "reset-offsets", "busy-group", "--topic", "busy", "--to-latest"),
            ("group", "delete", "busy-group"),
        ):
            result = run(*args, bootstrap=bootstrap)
            assert result.exit_code == 1 and "Error:" in result.output, result.output
    usage = run("group", "reset-offsets", "busy-group", "--topic", "busy", bootstrap=bootstrap)
    assert usage.exit_code == 2 and "exactly one" in usage.output
