"""``StandaloneCluster``: a Spark standalone master and workers started from the installed
PySpark (its ``bin/spark-class`` and bundled jars; no Spark download), on loopback.

    from flux.spark.standalone import StandaloneCluster
    from flux.spark import flux_session

    with StandaloneCluster(Path("/tmp/spark-standalone"), workers=2) as cluster:
        spark = flux_session("job", master=cluster.master_url, conf=cluster.driver_conf())
        ...

It is what tests, benchmarks and a developer's laptop need to run a pipeline the way it runs
in production (a driver, a master, executors in other JVMs on workers) without installing
Spark. Each process runs in its own process group with its log in ``work_dir``; readiness is
read from the master's web UI JSON (``/json/``: the workers it counts alive), never guessed
from a sleep. ``stop`` (also on leaving the ``with`` block, an error included) ends every
process it started, the workers' executors and their Python workers included.

The master's REST submission server is disabled: it would bind the fixed port 6066, which a
second cluster on the same machine (a parallel test) could not.

Thread-safety: none; one owner starts, inspects and stops a cluster. Invariants: at most
``WORKERS_MAX`` workers; a worker's ``pid`` is the Worker JVM (``spark-class`` ``exec``\\s
it), and everything the worker starts descends from it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from flux.cluster.launcher import free_port

__all__ = [
    "StandaloneCluster",
    "StandaloneStartError",
    "StandaloneWorker",
    "descendant_pids",
    "spark_home",
]

#: Bounds of this module (STYLE.md: limits on everything). Kept here rather than in
#: ``flux.spark.limits``, which holds the data source's option ranges.
#: A cluster has at most this many workers (each is a JVM of ~200 MB plus its executors).
WORKERS_MAX = 16
#: Master and workers must be up (the master counting every worker alive) within this.
READY_TIMEOUT_S = 90.0
#: ``stop`` waits this long after SIGTERM before SIGKILL.
STOP_TIMEOUT_S = 15.0
#: Polling interval of every ``wait_*`` here, and the timeout of one web UI request.
POLL_INTERVAL_S = 0.2
HTTP_TIMEOUT_S = 2.0
#: Lines of a process's log quoted in a start error.
LOG_TAIL_LINES = 40

_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


class StandaloneStartError(RuntimeError):
    """The master or a worker exited, or was not ready in time; the message quotes its log."""


def spark_home() -> str:
    """The installed PySpark's directory: it holds ``bin/spark-class`` and ``jars/``."""
    import pyspark

    return os.path.dirname(pyspark.__file__)


def descendant_pids(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, grandchildren...), read from ``/proc``
    (``ps`` where there is none). A snapshot: processes may come and go meanwhile."""
    children: dict[int, list[int]] = {}
    for child, parent in _parent_pids().items():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    pending = list(children.get(pid, []))
    while pending:
        current = pending.pop()
        found.append(current)
        pending += children.get(current, [])
    return found


def _parent_pids() -> dict[int, int]:
    """pid -> parent pid of every process."""
    proc = Path("/proc")
    if not proc.is_dir():
        output = subprocess.run(
            ["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True, check=True
        ).stdout
        return {int(pid): int(ppid) for pid, ppid in (line.split() for line in output.splitlines())}
    parents: dict[int, int] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    return parents


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        output = subprocess.run(
            ["ps", "-p", str(pid), "-o", "args="], capture_output=True, text=True
        ).stdout
        return output.strip()


def _kill_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (killed, not yet reaped by whoever inherited it) does
    not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not Path("/proc").is_dir():
        return True  # macOS: kill(0) is all there is
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False  # exited meanwhile
    return stat.rpartition(")")[2].split()[0] != "Z"


def _wait_gone(pids: list[int], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_INTERVAL_S)
    return True


def _get_json(url: str) -> Any | None:
    """The JSON at ``url``, or None while the server does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
            return json.load(response)
    except (OSError, ValueError):  # URLError and timeouts are OSErrors
        return None


class _Daemon:
    """One ``spark-class`` JVM in its own process group, logging to ``log_path``."""

    def __init__(self, name: str, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def launch(self, command: list[str], environment: Mapping[str, str]) -> None:
        assert self.process is None, f"{self.name} started twice"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                command,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=dict(environment),
            )

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} was never started"
        return self.process.pid

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def raise_if_exited(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise StandaloneStartError(
                f"Spark {self.name} exited with {self.process.returncode}:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def kill_tree(self) -> list[int]:
        """SIGKILL the JVM and everything below it at once (a machine lost, as far as Spark
        can tell) and wait until all of them are gone; the pids killed."""
        if not self.is_running():
            return []
        victims = [self.pid, *descendant_pids(self.pid)]
        _kill_all(victims, signal.SIGKILL)
        assert self.process is not None
        self.process.wait(timeout=STOP_TIMEOUT_S)
        if not _wait_gone(victims, STOP_TIMEOUT_S):
            raise RuntimeError(f"{self.name}: processes {victims} survived SIGKILL")
        return victims

    def stop(self) -> None:
        """SIGTERM the process group (Spark's shutdown hooks stop a worker's executors),
        SIGKILL it after ``STOP_TIMEOUT_S``, then SIGKILL whatever started below the JVM
        survived it (a Python worker daemon has its own process group)."""
        if self.process is None or self.process.poll() is not None:
            return
        below = descendant_pids(self.pid)
        group = self.pid  # started with start_new_session: it leads its process group
        try:
            os.killpg(group, signal.SIGTERM)
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(group, signal.SIGKILL)
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except ProcessLookupError:  # exited meanwhile
            pass
        _kill_all([pid for pid in below if _alive(pid)], signal.SIGKILL)


class StandaloneWorker:
    """One Worker JVM of a ``StandaloneCluster``: its web UI (``/json/``: id, executors) and
    its processes."""

    def __init__(self, index: int, work_dir: Path, web_ui_port: int) -> None:
        self.index = index
        self.work_dir = work_dir
        self.web_ui_port = web_ui_port
        self._daemon = _Daemon(f"worker {index}", work_dir.parent / f"worker-{index}.log")

    @property
    def pid(self) -> int:
        return self._daemon.pid

    @property
    def web_ui_url(self) -> str:
        return f"http://127.0.0.1:{self.web_ui_port}"

    def is_running(self) -> bool:
        return self._daemon.is_running()

    def state(self) -> dict[str, Any] | None:
        """The worker's web UI JSON (``id``, ``executors``: ``[{"id", "appid", ...}]``), or
        None while it does not answer."""
        return _get_json(f"{self.web_ui_url}/json/")

    def executor_pids(self) -> list[int]:
        """The executor JVMs (``CoarseGrainedExecutorBackend``) this worker started."""
        if not self.is_running():
            return []
        return [pid for pid in descendant_pids(self.pid) if _EXECUTOR_CLASS in _command_line(pid)]

    def kill(self) -> list[int]:
        """SIGKILL the Worker JVM, its executors and their Python workers at once (a lost
        machine) and wait until they are gone; the pids killed. The master and the drivers
        notice the closed connections."""
        return self._daemon.kill_tree()

    def stop(self) -> None:
        """SIGTERM (the worker stops its executors), SIGKILL after ``STOP_TIMEOUT_S``."""
        self._daemon.stop()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return self._daemon.log_tail(lines)


class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers of ``cores_per_worker`` cores and
    ``memory_per_worker`` memory each, on ``host`` (loopback by default), started from the
    installed PySpark (or the Spark installation at ``home``), each worker in
    ``work_dir/worker-<n>`` (executor directories, logs, scratch space).

    ``python`` is exported as ``PYSPARK_PYTHON`` to the master and workers, and executors
    inherit it; the interpreter Spark's Python workers actually run is the one the *driver*
    names in its own ``PYSPARK_PYTHON``, which ``flux_session`` sets to the driver's
    interpreter. Either way it must import ``flux``.

    Use it as a context manager (``start`` + ``wait_ready``, then ``stop``), or call those.
    ``kill`` a worker (``cluster.workers[i].kill()``) to test failures; ``replace_dead_workers``
    starts new ones in their place.
    """

    def __init__(
        self,
        work_dir: Path,
        *,
        workers: int = 2,
        cores_per_worker: int = 1,
        memory_per_worker: str = "1g",
        host: str = "127.0.0.1",
        python: str = sys.executable,
        home: str | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        if not 1 <= workers <= WORKERS_MAX:
            raise ValueError(f"workers must be 1..{WORKERS_MAX}, not {workers}")
        self.work_dir = Path(work_dir)
        self.worker_count = workers
        self.cores_per_worker = cores_per_worker
        self.memory_per_worker = memory_per_worker
        self.host = host
        self.python = python
        self.home = home or spark_home()
        self._extra_environment = dict(environment or {})
        self.master_port = free_port(host)
        self.master_web_ui_port = free_port(host)
        self._master = _Daemon("master", self.work_dir / "master.log")
        self.workers: list[StandaloneWorker] = []
        self._started_workers = 0

    # -- addresses ----------------------------------------------------------------------------

    @property
    def master_url(self) -> str:
        """What ``--master`` / ``flux_session(master=...)`` takes: ``spark://host:port``."""
        return f"spark://{self.host}:{self.master_port}"

    @property
    def master_web_ui_url(self) -> str:
        return f"http://{self.host}:{self.master_web_ui_port}"

    def driver_conf(self) -> dict[str, str]:
        """Spark settings for a driver on this machine: executors connect back to it on
        ``host``, the address the cluster listens on (by default the driver advertises the
        address the machine's name resolves to)."""
        return {"spark.driver.host": self.host, "spark.driver.bindAddress": self.host}

    # -- life cycle ---------------------------------------------------------------------------

    def __enter__(self) -> StandaloneCluster:
        try:
            self.start()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the master and the workers (without waiting: see ``wait_ready``)."""
        self._master.launch(
            [
                self._spark_class(),
                _MASTER_CLASS,
                "--host",
                self.host,
                "--port",
                str(self.master_port),
                "--webui-port",
                str(self.master_web_ui_port),
            ],
            self._environment(),
        )
        for _ in range(self.worker_count):
            self._start_worker()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
        """Block until the master is up and counts ``workers`` alive workers, each of them
        one this cluster started and running; the master's state. Raises
        ``StandaloneStartError`` if a process exited or time ran out."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._master.raise_if_exited()
            running = [worker for worker in self.workers if worker.is_running()]
            for worker in self.workers:
                if worker not in running:
                    worker._daemon.raise_if_exited()
            state = self.master_state()
            if state is not None and self._all_registered(state, running):
                return state
            if time.monotonic() > deadline:
                raise StandaloneStartError(
                    f"Spark standalone cluster not ready after {timeout_s} s (master state: "
                    f"{json.dumps(state)[:2000]}):\n{self._master.log_tail()}"
                )
            time.sleep(POLL_INTERVAL_S)

    def _all_registered(self, state: dict[str, Any], running: list[StandaloneWorker]) -> bool:
        alive_ports = {
            str(worker.get("webuiaddress", "")).rpartition(":")[2]
            for worker in state.get("workers", [])
            if worker.get("state") == "ALIVE"
        }
        return len(running) == self.worker_count and all(
            str(worker.web_ui_port) in alive_ports for worker in running
        )

    def replace_dead_workers(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start a new worker for each one that is not running, and wait until the master
        counts them alive (the dead ones' entries stay in its state, as ``DEAD``)."""
        self.workers = [worker for worker in self.workers if worker.is_running()]
        while len(self.workers) < self.worker_count:
            self._start_worker()
        self.wait_ready(timeout_s)

    def stop(self) -> None:
        """Stop the workers (with their executors), then the master. Idempotent; safe after a
        failed start."""
        try:
            for worker in self.workers:
                worker.stop()
        finally:
            self._master.stop()

    # -- inspection ---------------------------------------------------------------------------

    def master_state(self) -> dict[str, Any] | None:
        """The master's web UI JSON (``workers``, ``aliveworkers``, ``activeapps``...), or None
        while it does not answer."""
        return _get_json(f"{self.master_web_ui_url}/json/")

    def running_workers(self) -> Iterator[StandaloneWorker]:
        return (worker for worker in self.workers if worker.is_running())

    def log_tails(self, lines: int = LOG_TAIL_LINES) -> str:
        """The end of every process's log, for a failure message."""
        parts = [f"--- master ---\n{self._master.log_tail(lines)}"]
        parts += [
            f"--- worker {worker.index} ---\n{worker.log_tail(lines)}" for worker in self.workers
        ]
        return "\n".join(parts)

    # -- internals ----------------------------------------------------------------------------

    def _spark_class(self) -> str:
        return os.path.join(self.home, "bin", "spark-class")

    def _environment(self) -> dict[str, str]:
        master_options = os.environ.get("SPARK_MASTER_OPTS", "")
        return {
            **os.environ,
            "SPARK_HOME": self.home,
            "SPARK_LOCAL_IP": self.host,
            "SPARK_MASTER_OPTS": f"{master_options} -Dspark.master.rest.enabled=false".strip(),
            "PYSPARK_PYTHON": self.python,
            **self._extra_environment,
        }

    def _start_worker(self) -> StandaloneWorker:
        assert self._started_workers < WORKERS_MAX * 4, "workers restarted without bound"
        index = self._started_workers
        self._started_workers += 1
        worker = StandaloneWorker(
            index, self.work_dir / f"worker-{index}", web_ui_port=free_port(self.host)
        )
        worker.work_dir.mkdir(parents=True, exist_ok=True)
        worker._daemon.launch(
            [
                self._spark_class(),
                _WORKER_CLASS,
                self.master_url,
                "--host",
                self.host,
                "--cores",
                str(self.cores_per_worker),
                "--memory",
                self.memory_per_worker,
                "--webui-port",
                str(worker.web_ui_port),
                "--work-dir",
                str(worker.work_dir),
            ],
            # Executors' scratch space (shuffle files, blocks) under the worker's directory
            # rather than /tmp: a killed executor cannot delete its own.
            {**self._environment(), "SPARK_LOCAL_DIRS": str(worker.work_dir / "local")},
        )
        self.workers.append(worker)
        return worker
