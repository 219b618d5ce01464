"""The TypeScript V1 SDK (sdk/typescript) under Node's own test runner, against a real 3-node
cluster: compiled with Debian's node-typescript (tsc) into a temporary folder, then
``node --test`` with the cluster's V1 addresses in ``FLUX_V1_BROKERS`` and its node pids in
``FLUX_V1_VICTIMS`` (the SIGKILL test kills a partition leader). No npm package is used."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.http_helpers import running_cluster
from tests.integration.test_v1_sdk import V1_CLUSTER

pytestmark = pytest.mark.integration

SDK = Path(__file__).resolve().parents[2] / "sdk" / "typescript"


@pytest.mark.timeout(600)
def test_the_typescript_sdk_under_node_test(tmp_path: Path) -> None:
    node, tsc = shutil.which("node"), shutil.which("tsc")
    if node is None or tsc is None:
        pytest.skip("needs Debian's nodejs and node-typescript (.ci/run installs them)")
    build = tmp_path / "build"
    compiled = subprocess.run(
        [tsc, "-p", str(SDK), "--outDir", str(build)], capture_output=True, text=True, timeout=300
    )
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    with running_cluster(tmp_path / "cluster", **V1_CLUSTER) as nodes:
        env = {
            "PATH": "/usr/bin:/bin",
            "FLUX_V1_BROKERS": ",".join(process.ready["v1"] for process in nodes),
            "FLUX_V1_VICTIMS": ",".join(f"{process.node_id}={process.pid}" for process in nodes),
        }
        ran = subprocess.run(
            [node, "--test", str(build / "test")],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        report = ran.stdout + ran.stderr
        assert ran.returncode == 0, report[-4000:]
        assert "# pass 5" in report and "# skipped 0" in report, report[-2000:]
        # The SIGKILL test did kill a partition leader.
        assert sum(not process.is_running() for process in nodes) == 1
