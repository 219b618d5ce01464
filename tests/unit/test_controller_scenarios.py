"""Data-driven controller scenarios (etcd ``testdata`` style): ``controller_scenarios/*.txt``.

Each scenario starts from an empty ``MetadataImage``. Every command runs the pure handler, then
the image replays the records it returned (version + 1), exactly as the Raft layer would.

Grammar::

    # a comment (also after a command: "fence 1   # the leader dies")
    <command> <args...>
    ----
    <expected output lines>
    <blank line ends the expectation>

A command without ``----`` after it must succeed (error code 0); its output is not checked.
A command followed by ``----`` has its output compared line by line. Set
``FLUX_REWRITE_SCENARIOS=1`` to write the actual outputs into the files (then review the diff).

Commands (``<tp>`` is ``topic-partition``, e.g. ``orders-0``; lists are comma-separated):

    register <id> [inc=<incarnation>] [rack=<rack>] [logdir=<log dir id>]
                                                        default incarnation "a", log dir ""
    heartbeat <id> [inc=<incarnation>] [want-fence]
    fence <ids> | unfence <id>                          the election rules directly (several
                                                        ids: sessions that ended together)
    activate <node id>                                  a controller takes over (its first
                                                        command, ControllerActivated)
    create-topic <name> [partitions=N] [rf=N] [seed=N] [assign=1,2,3/2,3,1] [validate]
                 [config.<key>=<value>...] [id=<topic id>]   defaults: partitions=1 rf=1 seed=0
    delete-topic <name> | delete-topic id=<topic id>
    create-partitions <name> count=N [seed=N] [assign=1,2/2,3] [validate]
    alter-partition <tp> broker=<id> isr=<ids> [inc=<incarnation>] [leader-epoch=N]
                    [partition-epoch=N] [topic-id=<id>]  epochs default to the current ones
    elect preferred|unclean [<tp>...]                    no partitions: all of them
    alter-config topic|broker <name> <key>=<value>|<key>=   (empty value deletes)
    show [<topic>]      every partition:  <tp> replicas=[..] isr=[..] leader=N epoch=L/P
                        [elr=[..]]  (the ELR only when not empty)
    brokers             every broker:     broker <id> inc=<inc> rack=<rack> <state>, state
                        fenced, live, or unconfirmed (live, not yet heard from by the
                        active controller)
    leaders             leaders per broker:  leaders 1=2 2=2 3=2
    imbalance           partitions electable by "preferred"

Output of a mutating command: ``error <ERROR_NAME>: <message>`` if rejected; otherwise one
line per broker or partition whose state changed (format of ``brokers``/``show``),
``deleted <topic>``, ``config <type> <name> <k>=<v>,...`` and, for ``elect``, the per-partition
errors as ``<tp> <ERROR_NAME>``; ``no change`` when nothing changed. A query with nothing
to list prints ``(none)``.
"""

from __future__ import annotations

import os
import random
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flux.controller import handlers
from flux.controller.handlers import ControllerResult
from flux.controller.image import MetadataImage, PartitionState
from flux.controller.records import ControllerActivated, Record
from flux.protocol.errors import ErrorCode

QUERIES = {"show", "brokers", "leaders", "imbalance"}
SCENARIO_DIR = Path(__file__).parent / "controller_scenarios"
REWRITE = os.environ.get("FLUX_REWRITE_SCENARIOS") == "1"


@dataclass
class Step:
    line_number: int
    command: str
    expected: list[str] | None  # None: only check success


def parse_scenario(text: str) -> list[Step]:
    lines = text.splitlines()
    steps: list[Step] = []
    i = 0
    while i < len(lines):
        raw = lines[i]
        command = raw.split("#", 1)[0].strip()
        i += 1
        line_number = i
        if not command:
            continue
        expected: list[str] | None = None
        if i < len(lines) and lines[i].strip() == "----":
            i += 1
            expected = []
            while i < len(lines) and lines[i].strip():
                expected.append(lines[i].rstrip())
                i += 1
        steps.append(Step(line_number=line_number, command=command, expected=expected))
    return steps


def render_scenario(steps: list[Step], outputs: list[list[str]], original: str) -> str:
    """Rewrite ``original`` with the actual outputs of the steps that have expectations."""
    lines = original.splitlines()
    result: list[str] = []
    step_index = 0
    i = 0
    while i < len(lines):
        raw = lines[i]
        result.append(raw)
        i += 1
        if not raw.split("#", 1)[0].strip():
            continue
        if i < len(lines) and lines[i].strip() == "----":
            result.append("----")
            i += 1
            while i < len(lines) and lines[i].strip():
                i += 1
            result.extend(outputs[step_index])
        step_index += 1
    return "\n".join(result) + "\n"


def format_partition(name: str, index: int, state: PartitionState) -> str:
    elr = f" elr={_ids(state.elr)}" if state.elr else ""
    return (
        f"{name}-{index} replicas={_ids(state.replicas)} isr={_ids(state.isr)} "
        f"leader={state.leader} epoch={state.leader_epoch}/{state.partition_epoch}{elr}"
    )


def _ids(ids: Any) -> str:
    return "[" + ",".join(str(i) for i in ids) + "]"


def _parse_ids(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def _split_tp(text: str) -> tuple[str, int]:
    name, _, index = text.rpartition("-")
    return name, int(index)


class ScenarioRunner:
    def __init__(self) -> None:
        self.image = MetadataImage.EMPTY
        self.topic_counter = 0

    # -- output ---------------------------------------------------------------------------

    def broker_lines(self, image: MetadataImage, ids: Any = None) -> list[str]:
        lines = []
        for broker_id, b in image.brokers.items():
            if ids is not None and broker_id not in ids:
                continue
            state = "fenced" if b.fenced else ("live" if b.alive else "unconfirmed")
            lines.append(f"broker {broker_id} inc={b.incarnation_id} rack={b.rack} {state}")
        return lines

    def partition_lines(self, image: MetadataImage, topic: str | None = None) -> list[str]:
        return [
            format_partition(name, index, state)
            for name, t in image.topics.items()
            if topic is None or name == topic
            for index, state in enumerate(t.partitions)
        ]

    def diff(self, old: MetadataImage, new: MetadataImage) -> list[str]:
        lines = []
        changed_brokers = [b for b in new.brokers if old.brokers.get(b) != new.brokers[b]]
        lines += self.broker_lines(new, changed_brokers)
        for name, topic in old.topics.items():
            if new.topic_by_id(topic.topic_id) is None:
                lines.append(f"deleted {name}")
        for name, topic in new.topics.items():
            before = old.topic_by_id(topic.topic_id)
            for index, state in enumerate(topic.partitions):
                if before is None or index >= len(before.partitions):
                    lines.append(format_partition(name, index, state))
                elif before.partitions[index] != state:
                    lines.append(format_partition(name, index, state))
            if before is not None and before.config != topic.config:
                lines.append(f"config topic {name} {_pairs(topic.config)}")
        for name in sorted(set(old.broker_configs) | set(new.broker_configs)):
            if old.broker_configs.get(name) != new.broker_configs.get(name):
                shown = name or '""'
                lines.append(f"config broker {shown} {_pairs(new.broker_configs.get(name, ()))}")
        return lines

    # -- execution ------------------------------------------------------------------------

    def apply(self, records: list[Record]) -> list[str]:
        old = self.image
        self.image = old.replay_all(records, old.version + 1)
        check_elections(old, self.image)
        return self.diff(old, self.image)

    def run(self, command: str) -> tuple[bool, list[str]]:
        words = shlex.split(command)
        name, args = words[0], words[1:]
        flags = [a for a in args if "=" not in a]
        options = dict(a.split("=", 1) for a in args if "=" in a)
        method = getattr(self, "cmd_" + name.replace("-", "_"), None)
        if method is None:
            raise ValueError(f"unknown scenario command {name!r}")
        ok, lines = method(flags, options)
        if name in QUERIES:
            return ok, lines or ["(none)"]
        return ok, lines or ["no change"]

    def result_lines(self, result: ControllerResult) -> tuple[bool, list[str]]:
        code = ErrorCode(result.response["error_code"])
        if code != ErrorCode.NONE:
            assert not result.records, "a rejected request must not produce records"
            return False, [f"error {code.name}: {result.response['error_message']}"]
        return True, self.apply(result.records)

    def cmd_register(self, flags: list[str], options: dict[str, str]) -> tuple[bool, list[str]]:
        broker_id = int(flags[0])
        return self.result_lines(
            handlers.register_broker(
                self.image,
                broker_id=broker_id,
                incarnation_id=options.get("inc", "a"),
                kafka_host=f"b{broker_id}",
                kafka_port=9000 + broker_id,
                http_host=f"b{broker_id}",
                http_port=8000 + broker_id,
                rack=options.get("rack"),
                log_dir_id=options.get("logdir", ""),
            )
        )

    def cmd_activate(self, flags: list[str], options: dict[str, str]) -> tuple[bool, list[str]]:
        return True, self.apply([ControllerActivated(node_id=int(flags[0]))])

    def cmd_heartbeat(self, flags: list[str], options: dict[str, str]) -> tuple[bool, list[str]]:
        result = handlers.broker_heartbeat(
            self.image,
            broker_id=int(flags[0]),
            incarnation_id=options.get("inc", "a"),
            want_fence="want-fence" in flags,
        )
        ok, lines = self.result_lines(result)
        if ok:
            assert result.response["fenced"] == self.image.brokers[int(flags[0])].fenced
        return ok, lines

    def cmd_fence(self, flags: list[str], options: dict[str, str]) -> tuple[bool, list[str]]:
        return True, self.apply(handlers.fence_brokers(self.image, _parse_ids(flags[0])))

    def cmd_unfence(self, flags: list[str], options: dict[str, str]) -> tuple[bool, list[str]]:
        return True, self.apply(handlers.unfence_broker(self.image, int(flags[0])))

    def _assignments(self, options: dict[str, str]) -> list[list[int]] | None:
        if "assign" not in options:
            return None
        return [_parse_ids(part) for part in options["assign"].split("/")]

    def cmd_create_topic(self, flags: list[str], options: dict[str, str]) -> tuple[bool, list[str]]:
        self.topic_counter += 1
        assignments = self._assignments(options)
        result = handlers.create_topic(
            self.image,
            name=flags[0],
            num_partitions=int(options.get("partitions", -1)),
            replication_factor=int(options.get("rf", -1)),
            assignments=None if assignments is None else dict(enumerate(assignments)),
            configs={k[len("config.") :]: v for k, v in options.items() if k.startswith("config.")},
            topic_id=options.get("id", f"id{self.topic_counter}"),
            default_partitions=1,
            default_replication_factor=1,
            rng=random.Random(int(options.get("seed", 0))),
            validate_only="validate" in flags,
        )
        if "validate" in flags and result.ok:
            assert not result.records
            return True, [f"valid {_ids(p['replicas'])}" for p in result.response["partitions"]]
        return self.result_lines(result)

    def cmd_delete_topic(self, flags: list[str], options: dict[str, str]) -> tuple[bool, list[str]]:
        return self.result_lines(
            handlers.delete_topic(
                self.image, name=flags[0] if flags else None, topic_id=options.get("id")
            )
        )

    def cmd_create_partitions(
        self, flags: list[str], options: dict[str, str]
    ) -> tuple[bool, list[str]]:
        result = handlers.create_partitions(
            self.image,
            name=flags[0],
            count=int(options["count"]),
            assignments=self._assignments(options),
            rng=random.Random(int(options.get("seed", 0))),
            validate_only="validate" in flags,
        )
        if "validate" in flags and result.ok:
            assert not result.records
            return True, [f"valid {_ids(p['replicas'])}" for p in result.response["partitions"]]
        return self.result_lines(result)

    def cmd_alter_partition(
        self, flags: list[str], options: dict[str, str]
    ) -> tuple[bool, list[str]]:
        name, index = _split_tp(flags[0])
        topic = self.image.topics.get(name)
        state = topic.partitions[index] if topic and index < len(topic.partitions) else None
        result = handlers.alter_partition(
            self.image,
            broker_id=int(options["broker"]),
            incarnation_id=options.get("inc", "a"),
            topic_id=options.get("topic-id", topic.topic_id if topic else "missing"),
            partition=index,
            leader_epoch=int(options.get("leader-epoch", state.leader_epoch if state else 0)),
            partition_epoch=int(
                options.get("partition-epoch", state.partition_epoch if state else 0)
            ),
            isr=_parse_ids(options["isr"]),
        )
        return self.result_lines(result)

    def cmd_elect(self, flags: list[str], options: dict[str, str]) -> tuple[bool, list[str]]:
        election_type, targets = flags[0], flags[1:]
        partitions = [_split_tp(t) for t in targets] if targets else None
        result = handlers.elect_leaders(
            self.image, partitions=partitions, election_type=election_type
        )
        ok, lines = self.result_lines(result)
        if not ok:
            return ok, lines
        for outcome in result.response["partitions"]:
            if outcome["error_code"] != 0:
                code = ErrorCode(outcome["error_code"]).name
                lines.append(f"{outcome['topic']}-{outcome['partition']} {code}")
        return ok, lines

    def cmd_alter_config(self, flags: list[str], options: dict[str, str]) -> tuple[bool, list[str]]:
        changes = {k: (v if v else None) for k, v in options.items()}
        return self.result_lines(
            handlers.alter_configs(
                self.image, resource_type=flags[0], resource_name=flags[1], changes=changes
            )
        )

    def cmd_show(self, flags: list[str], options: dict[str, str]) -> tuple[bool, list[str]]:
        return True, self.partition_lines(self.image, flags[0] if flags else None)

    def cmd_brokers(self, flags: list[str], options: dict[str, str]) -> tuple[bool, list[str]]:
        return True, self.broker_lines(self.image)

    def cmd_leaders(self, flags: list[str], options: dict[str, str]) -> tuple[bool, list[str]]:
        counts = {broker_id: 0 for broker_id in self.image.brokers}
        for topic in self.image.topics.values():
            for state in topic.partitions:
                if state.leader != -1:
                    counts[state.leader] = counts.get(state.leader, 0) + 1
        return True, ["leaders " + " ".join(f"{b}={n}" for b, n in sorted(counts.items()))]

    def cmd_imbalance(self, flags: list[str], options: dict[str, str]) -> tuple[bool, list[str]]:
        return True, [f"{n}-{i}" for n, i in handlers.preferred_leader_imbalance(self.image)]


def _pairs(pairs: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in pairs) or "(none)"


def _scenario_files() -> Iterator[Path]:
    return iter(sorted(SCENARIO_DIR.glob("*.txt")))


def check_invariants(image: MetadataImage) -> None:
    for name, topic in image.topics.items():
        for index, state in enumerate(topic.partitions):
            where = f"{name}-{index}"
            assert set(state.isr) <= set(state.replicas), where
            assert set(state.elr) <= set(state.replicas), where
            assert not set(state.elr) & set(state.isr), f"{where}: ELR and ISR overlap"
            if state.leader != -1:
                assert state.leader in state.isr, where
                assert image.is_live(state.leader), f"{where}: leader {state.leader} is not live"


def check_elections(old: MetadataImage, new: MetadataImage) -> None:
    """No leader is ever elected onto a broker the active controller has not heard from."""
    for name, topic in new.topics.items():
        before = old.topic_by_id(topic.topic_id)
        for index, state in enumerate(topic.partitions):
            if before is None or index >= len(before.partitions):
                continue
            if state.leader not in (-1, before.partitions[index].leader):
                assert new.is_alive(state.leader), f"{name}-{index}: elected {state.leader}"


@pytest.mark.parametrize("path", list(_scenario_files()), ids=lambda p: p.stem)
def test_scenario(path: Path) -> None:
    original = path.read_text()
    steps = parse_scenario(original)
    runner = ScenarioRunner()
    outputs: list[list[str]] = []
    failures = []
    for step in steps:
        ok, lines = runner.run(step.command)
        check_invariants(runner.image)
        outputs.append(lines)
        if step.expected is None:
            assert ok, f"{path.name}:{step.line_number}: {step.command!r} failed: {lines}"
        elif lines != step.expected:
            failures.append(
                f"{path.name}:{step.line_number}: {step.command}\n"
                f"  expected:\n    " + "\n    ".join(step.expected) + "\n"
                "  actual:\n    " + "\n    ".join(lines)
            )
    if REWRITE:
        path.write_text(render_scenario(steps, outputs, original))
        return
    assert not failures, "\n".join(failures)


def test_scenarios_exist() -> None:
    assert len(list(_scenario_files())) >= 5
