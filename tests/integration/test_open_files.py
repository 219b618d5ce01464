"""The node's open-file limit: raised from the soft to the hard limit at start (as the JVM does
for Kafka), reported in /metrics, warned about when low; running out of descriptors is named
as such, not as a broken disk."""

from __future__ import annotations

import json
import resource
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from flux.cluster.launcher import NodeProcess, local_cluster_configs
from flux.cluster.open_files import LOW_OPEN_FILE_LIMIT

from tests.integration.helpers import wait_until
from tests.integration.http_helpers import metric_value

pytestmark = pytest.mark.integration


@contextmanager
def _node_with_limits(root: Path, soft: int, hard: int) -> Iterator[NodeProcess]:
    """One node started under ``prlimit --nofile=soft:hard`` (which execs it)."""
    (node,) = local_cluster_configs(root, 1)
    node.command_prefix = ("prlimit", f"--nofile={soft}:{hard}", "--")
    try:
        node.start()
        node.wait_ready()
        yield node
    finally:
        node.stop(timeout_s=10.0)


def _max_open_files(pid: int | None) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-file limit")


def test_the_soft_limit_is_raised_to_the_hard_one(tmp_path: Path) -> None:
    # The hard limit this machine gives (lowering a hard limit needs no privilege).
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hard = 50_000 if hard == resource.RLIM_INFINITY else min(hard, 50_000)
    with _node_with_limits(tmp_path, 256, hard) as node:
        assert _max_open_files(node.pid) == (hard, hard)
        assert metric_value(node, "process_max_fds") == hard
        assert 0 < metric_value(node, "process_open_fds") < hard
        log = node.log_path.read_text()
        if hard >= LOW_OPEN_FILE_LIMIT:
            assert f"open-file limit: {hard}" in log and "open-file limit is low" not in log
        else:
            assert f"raise the open-file limit (now {hard})" in log


def test_running_out_of_descriptors_is_named_and_moves_nothing_silently(tmp_path: Path) -> None:
    with _node_with_limits(tmp_path, 300, 300) as node:
        log = node.log_path.read_text()
        assert "open-file limit is low" in log and "(now 300)" in log, log[-2000:]
        # A topic needing more segment files than the limit allows.
        admin = AdminClient({"bootstrap.servers": node.ready["bootstrap_servers"]})
        for future in admin.create_topics([NewTopic("wide", 400, 1)]).values():
            future.result(timeout=60)

        def offline() -> bool:
            try:
                urllib.request.urlopen(f"http://{node.ready['broker_http']}/health", timeout=10)
            except urllib.error.HTTPError as error:
                return bool(json.loads(error.read()).get("log_dir_offline"))
            return False

        wait_until(offline, timeout_s=60)
        log = node.log_path.read_text()
        assert "EMFILE" in log and "this process ran out of file descriptors" in log, log[-3000:]
        assert "raise the open-file limit (now 300)" in log
        assert "Free space or fix the disk" not in log
