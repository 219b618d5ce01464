"""``fluxctl topic`` / ``produce`` / ``consume`` against a real broker, through click's CliRunner
on the command objects (so the tests do not depend on their registration in ``cli/main.py``)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from flux.cli._bootstrap import DEFAULT_BOOTSTRAP, default_bootstrap
from flux.cli.client_commands import consume, produce
from flux.cli.topic import topic
from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.protocol.partitioner import partition_for_key
from flux.protocol.records import build_batch
from flux.sdk.wire import KafkaConnection

from tests.integration import cluster_helpers, helpers
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration


@click.group()
def fluxctl() -> None:
    """Stand-in for ``flux.cli.main.main``."""


fluxctl.add_command(topic)
fluxctl.add_command(produce)
fluxctl.add_command(consume)


def run(*args: str, bootstrap: str | None = None, env: dict[str, str] | None = None) -> Result:
    argv = list(args)
    if bootstrap is not None:
        argv += ["--bootstrap", bootstrap]
    return CliRunner().invoke(fluxctl, argv, env=env)


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result


def _unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_topic_lifecycle(broker) -> None:
    bootstrap = broker.bootstrap_servers
    created = ok(
        run(
            "topic", "create", "events", "--partitions", "3", "--replication-factor", "1",
            "--config", "retention.ms=60000", "--config", "segment.bytes=1048576",
            bootstrap=bootstrap,
        )
    )  # fmt: skip
    assert "Created topic events with 3 partitions" in created.stdout

    listed = json.loads(ok(run("topic", "list", "--json", bootstrap=bootstrap)).stdout)
    assert listed == {"topics": ["events"]}
    assert ok(run("topic", "list", bootstrap=bootstrap)).stdout.split() == ["events"]

    described = json.loads(
        ok(run("topic", "describe", "events", "--json", bootstrap=bootstrap)).stdout
    )
    assert set(described) == {"name", "topic_id", "internal", "partitions", "configs"}
    assert described["name"] == "events" and described["internal"] is False
    assert described["configs"] == {"retention.ms": "60000", "segment.bytes": "1048576"}
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    for partition in described["partitions"]:
        assert set(partition) == {
            "partition", "leader", "leader_epoch", "replicas", "isr", "offline_replicas",
            "high_watermark", "replica_log_end_offsets", "replica_lag",
        }  # fmt: skip
        assert partition["leader"] >= 0
        assert partition["replicas"] == partition["isr"] == [partition["leader"]]
        assert partition["offline_replicas"] == []
        leader = str(partition["leader"])
        assert partition["replica_log_end_offsets"] == {leader: partition["high_watermark"]}
        assert partition["replica_lag"] == {leader: 0}

    table = ok(run("topic", "describe", "events", bootstrap=bootstrap)).stdout
    for heading in ("partition", "leader", "leader epoch", "replicas", "isr", "offline"):
        assert heading in table
    assert "retention.ms=60000" in table

    assert (
        "Deleted topic events" in ok(run("topic", "delete", "events", bootstrap=bootstrap)).stdout
    )

    def gone() -> bool:  # deletion reaches the brokers' metadata shortly after the controller
        listed = json.loads(ok(run("topic", "list", "--json", bootstrap=bootstrap)).stdout)
        return listed == {"topics": []}

    wait_until(gone, timeout_s=10)
    missing = run("topic", "describe", "events", bootstrap=bootstrap)
    assert missing.exit_code == 1
    assert missing.stderr.strip() == "Error: topic 'events' does not exist"
    assert "Traceback" not in missing.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["topic", "create", "bad/name"], "bad/name"),
        (["topic", "create", "zero", "--partitions", "0"], "partition"),
        (["topic", "create", "cfg", "--config", "no.such=1"], "no.such"),
        (["topic", "create", "rf", "--replication-factor", "5"], "replication factor"),
        (["topic", "delete", "ghost"], "ghost"),
    ],
)
def test_broker_errors_exit_1_with_message(broker, args, message) -> None:
    result = run(*args, bootstrap=broker.bootstrap_servers)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("Error: ")
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_existing_topic_exits_1(broker) -> None:
    ok(run("topic", "create", "once", bootstrap=broker.bootstrap_servers))
    again = run("topic", "create", "once", bootstrap=broker.bootstrap_servers)
    assert again.exit_code == 1
    assert "already exists" in again.stderr


def test_bad_config_syntax_is_a_usage_error(broker) -> None:
    result = run("topic", "create", "x", "--config", "novalue", bootstrap=broker.bootstrap_servers)
    assert result.exit_code == 2
    assert "KEY=VALUE" in result.stderr


def test_unreachable_cluster_names_the_address() -> None:
    address = f"127.0.0.1:{_unused_port()}"
    result = run("topic", "list", "--timeout", "1", bootstrap=address)
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ")
    assert address in result.stderr
    assert "Traceback" not in result.output


def test_bootstrap_from_environment(broker) -> None:
    env = {"FLUX_BOOTSTRAP": broker.bootstrap_servers}
    ok(run("topic", "create", "from-env", env=env))
    assert json.loads(ok(run("topic", "list", "--json", env=env)).stdout) == {
        "topics": ["from-env"]
    }


def test_default_bootstrap_reads_the_local_cluster_state(tmp_path: Path) -> None:
    state = tmp_path / "cluster.json"
    assert default_bootstrap(state) == DEFAULT_BOOTSTRAP  # no file
    state.write_text(json.dumps({"bootstrap_servers": "h1:1,h2:2", "nodes": []}))
    assert default_bootstrap(state) == "h1:1,h2:2"
    state.write_text(
        json.dumps({"nodes": [{"id": 1, "kafka": "h1:1"}, {"id": 2, "bootstrap": "h2:2"}]})
    )
    assert default_bootstrap(state) == "h1:1,h2:2"
    # A node stopped by `cluster down` (pid null) is left out.
    state.write_text(json.dumps({"nodes": [{"id": 1, "kafka": "h1:1", "pid": None}]}))
    assert default_bootstrap(state) == DEFAULT_BOOTSTRAP
    state.write_text("not json")
    assert default_bootstrap(state) == DEFAULT_BOOTSTRAP


def test_produce_and_consume_commands(broker) -> None:
    bootstrap = broker.bootstrap_servers
    ok(run("topic", "create", "cli-io", "--partitions", "2", bootstrap=bootstrap))
    sent = ok(
        run("produce", "cli-io", "--key", "k1", "-H", "src=cli", "--json", "a", "b",
            bootstrap=bootstrap)
    )  # fmt: skip
    placements = [json.loads(line) for line in sent.stdout.splitlines()]
    expected = partition_for_key(b"k1", 2)
    assert placements == [
        {"partition": expected, "offset": 0},
        {"partition": expected, "offset": 1},
    ]
    ok(run("produce", "cli-io", "--partition", "0", "c", bootstrap=bootstrap))

    lines = ok(
        run("consume", "cli-io", "--from-beginning", "--json", bootstrap=bootstrap)
    ).stdout.splitlines()
    records = [json.loads(line) for line in lines]
    assert sorted(r["value"] for r in records) == ["a", "b", "c"]
    keyed = [r for r in records if r["key"] == "k1"]
    assert [r["value"] for r in keyed] == ["a", "b"]
    assert all(r["headers"] == [["src", "cli"]] for r in keyed)

    limited = ok(run("consume", "cli-io", "--from-beginning", "--max", "1", bootstrap=bootstrap))
    assert len(limited.stdout.splitlines()) == 1
    # Without --from-beginning it starts at the end: nothing new arrives before the idle timeout.
    tail = ok(run("consume", "cli-io", "--idle-timeout", "0.2", bootstrap=bootstrap))
    assert tail.stdout == ""


def _topic_overrides(bootstrap: str, name: str) -> dict[str, str]:
    """``name``'s config overrides as the broker at ``bootstrap`` reports them."""
    with KafkaConnection.from_bootstrap(bootstrap) as conn:
        answer = conn.request(
            ApiKey.DESCRIBE_CONFIGS,
            4,
            {
                "resources": [
                    {"resource_type": 2, "resource_name": name, "configuration_keys": None}
                ]
            },
        )
    (result,) = answer["results"]
    assert result["error_code"] == ErrorCode.NONE, result
    return {c["name"]: c["value"] for c in result["configs"] if c["config_source"] == 1}


def test_alter_config_sets_and_deletes(broker) -> None:
    bootstrap = broker.bootstrap_servers
    ok(run("topic", "create", "tuned", "--config", "retention.ms=60000",
           "--config", "segment.bytes=1048576", bootstrap=bootstrap))  # fmt: skip
    altered = ok(
        run("topic", "alter-config", "tuned", "--set", "retention.ms=120000",
            "--set", "cleanup.policy=compact,delete", "--delete", "segment.bytes",
            bootstrap=bootstrap)
    )  # fmt: skip
    assert altered.stdout.strip() == (
        "Altered configs of topic tuned: set retention.ms=120000, "
        "set cleanup.policy=compact,delete, deleted segment.bytes"
    )
    expected = {"retention.ms": "120000", "cleanup.policy": "compact,delete"}
    assert _topic_overrides(bootstrap, "tuned") == expected

    as_json = json.loads(
        ok(run("topic", "alter-config", "tuned", "--set", "flush.ms=5000", "--json",
               bootstrap=bootstrap)).stdout
    )  # fmt: skip
    assert as_json == {
        "name": "tuned",
        "set": {"flush.ms": "5000"},
        "deleted": [],
        "validate_only": False,
        "configs": {**expected, "flush.ms": "5000"},
    }
    checked = ok(
        run("topic", "alter-config", "tuned", "--delete", "flush.ms", "--validate-only",
            bootstrap=bootstrap)
    )  # fmt: skip
    assert checked.stdout.startswith("Validated configs of topic tuned")
    assert _topic_overrides(bootstrap, "tuned")["flush.ms"] == "5000"


@pytest.mark.parametrize(
    ("args", "exit_code", "message"),
    [
        (["ghost", "--set", "retention.ms=1"], 1, "Error: topic 'ghost' does not exist"),
        (["tuned", "--set", "retention.ms=soon"], 1, "retention.ms"),
        (["tuned", "--set", "no.such.key=1"], 1, "no.such.key"),
        (["tuned", "--delete", "no.such.key"], 1, "no.such.key"),
        (["tuned"], 2, "nothing to change"),
        (["tuned", "--set", "flush.ms=1", "--delete", "flush.ms"], 2, "flush.ms"),
        (["tuned", "--set", "novalue"], 2, "--set expects KEY=VALUE"),
    ],
)
def test_alter_config_errors(broker, args, exit_code, message) -> None:
    ok(run("topic", "create", "tuned", "--config", "retention.ms=60000",
           bootstrap=broker.bootstrap_servers))  # fmt: skip
    result = run("topic", "alter-config", *args, bootstrap=broker.bootstrap_servers)
    assert result.exit_code == exit_code, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert _topic_overrides(broker.bootstrap_servers, "tuned") == {"retention.ms": "60000"}


def test_alter_config_reaches_every_replica_without_a_restart(cluster_factory) -> None:
    """A config change made through one broker becomes every broker's effective config: each
    reports it in DescribeConfigs, and each partition leader (one per broker) enforces it."""
    nodes = cluster_factory(3)
    by_id = {node.node_id: node for node in nodes}
    created = cluster_helpers.create_topic(nodes[0], "spread", 3, 3, retention_ms="60000")
    assert created["error_code"] == ErrorCode.NONE, created

    def leaders_everywhere() -> dict[int, int] | None:
        views = [cluster_helpers.metadata(node, ["spread"])["topics"][0] for node in nodes]
        if any(view["error_code"] or len(view["partitions"]) != 3 for view in views):
            return None
        leaders = {p["partition_index"]: p["leader_id"] for p in views[0]["partitions"]}
        return leaders if all(leader in by_id for leader in leaders.values()) else None

    leaders = wait_until(leaders_everywhere)
    assert sorted(leaders.values()) == sorted(by_id), leaders  # each broker leads one

    def produce_everywhere() -> dict[int, int]:
        """Partition -> error code of a 2 KB record produced to its leader."""
        codes = {}
        for partition, leader in leaders.items():
            with KafkaConnection.from_bootstrap(by_id[leader].bootstrap_servers) as conn:
                batch = build_batch([(b"k", b"v" * 2048, ())])
                answer = helpers.produce(conn, "spread", batch, partition=partition)
                codes[partition] = answer["error_code"]
        return codes

    assert set(produce_everywhere().values()) == {ErrorCode.NONE}
    bootstrap = nodes[0].bootstrap_servers
    ok(run("topic", "alter-config", "spread", "--set", "max.message.bytes=512",
           "--set", "retention.ms=90000", bootstrap=bootstrap))  # fmt: skip
    changed = {"retention.ms": "90000", "max.message.bytes": "512"}
    for node in nodes:
        wait_until(lambda node=node: _topic_overrides(node.bootstrap_servers, "spread") == changed)
    wait_until(lambda: set(produce_everywhere().values()) == {ErrorCode.MESSAGE_TOO_LARGE})

    ok(run("topic", "alter-config", "spread", "--delete", "max.message.bytes",
           bootstrap=bootstrap))  # fmt: skip
    for node in nodes:
        wait_until(
            lambda node=node: (
                _topic_overrides(node.bootstrap_servers, "spread") == {"retention.ms": "90000"}
            )
        )
    wait_until(lambda: set(produce_everywhere().values()) == {ErrorCode.NONE})


def test_produce_from_a_file_and_consume_draw_progress_on_stderr_only(broker, tmp_path) -> None:
    """A progress bar on stderr where a person watches (forced here: FLUX_PROGRESS=always,
    CliRunner's stderr is no terminal); stdout is the same as without it; --json and
    FLUX_PROGRESS=never draw nothing."""
    bootstrap = broker.bootstrap_servers
    ok(run("topic", "create", "cli-progress", "--partitions", "2", bootstrap=bootstrap))
    source = tmp_path / "records.txt"
    source.write_text("".join(f"record-{i}\n" for i in range(2500)))
    shown = ok(
        run("produce", "cli-progress", "--file", str(source), bootstrap=bootstrap,
            env={"FLUX_PROGRESS": "always"})
    )  # fmt: skip
    assert len(shown.stdout.splitlines()) == 2500
    assert "producing to cli-progress" in shown.stderr and "2500/2500" in shown.stderr
    quiet = ok(
        run("produce", "cli-progress", "--file", str(source), "--json", bootstrap=bootstrap,
            env={"FLUX_PROGRESS": "auto"})
    )  # fmt: skip
    assert len(quiet.stdout.splitlines()) == 2500 and quiet.stderr == ""
    consumed = ok(
        run("consume", "cli-progress", "--from-beginning", "--max-messages", "4000",
            bootstrap=bootstrap, env={"FLUX_PROGRESS": "always"})
    )  # fmt: skip
    assert len(consumed.stdout.splitlines()) == 4000
    assert "consuming cli-progress" in consumed.stderr and "4000/4000" in consumed.stderr
    silent = ok(
        run("consume", "cli-progress", "--from-beginning", "--max-messages", "10",
            bootstrap=bootstrap, env={"FLUX_PROGRESS": "never"})
    )  # fmt: skip
    assert len(silent.stdout.splitlines()) == 10 and silent.stderr == ""
    both = run("produce", "cli-progress", "x", "--file", str(source), bootstrap=bootstrap)
    assert both.exit_code == 2 and "exclude each other" in both.output
