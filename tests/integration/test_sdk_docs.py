"""Every ``python`` example of ``docs/sdk.md`` runs, as written, against a real node."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "sdk.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_the_doc_has_examples() -> None:
    assert len(EXAMPLES) >= 5


def test_every_example_runs(broker, tmp_path: Path) -> None:
    env = {**os.environ, "FLUX_BOOTSTRAP": broker.bootstrap_servers}
    printed = []
    for index, example in enumerate(EXAMPLES):
        script = tmp_path / f"example_{index}.py"
        script.write_text(example)
        done = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=90
        )
        assert done.returncode == 0, f"example {index} failed:\n{example}\n{done.stderr[-3000:]}"
        printed.append(done.stdout)
    everything = "\n".join(printed)
    # What the examples say they show: a retried handler, typed errors naming their cause.
    assert "failures: 1" in everything
    assert "TOPIC_ALREADY_EXISTS" in everything
    assert "linger_ms" in everything and "MESSAGE_TOO_LARGE" in everything
    assert "[(b'order-17', b'paid'), (b'order-17', b'shipped')]" in everything
