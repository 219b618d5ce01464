"""Node process assembly: configuration, stores, listeners, signals, and the ready file.

``run_node(config)`` runs until SIGTERM or SIGINT, then stops accepting requests, flushes every
log and checkpoints recovery points. Once listening, the node writes ``<data_dir>/ready.json``
with its id, pid and bound ports (ports may be 0 in the config, meaning "any free port"), which
is how ``fluxctl cluster`` and the tests learn where a node listens.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from pathlib import Path

from .config import NodeConfig
from .kafka_apis import ADVERTISED_VERSIONS, KafkaApis
from .kafka_server import KafkaServer
from .launcher import READY_FILE
from .replica_manager import ReplicaManager

__all__ = ["Node", "run_node"]

log = logging.getLogger("flux.cluster.node")


class Node:
    """One Flux node (this stage: the broker role only)."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.replicas: ReplicaManager | None = None
        self.kafka: KafkaServer | None = None

    async def start(self) -> None:
        config = self.config
        if "broker" not in config.node.roles:
            raise NotImplementedError("the controller role arrives with the controller quorum")
        ready_path = config.data_dir / READY_FILE
        config.data_dir.mkdir(parents=True, exist_ok=True)
        ready_path.unlink(missing_ok=True)
        self.replicas = ReplicaManager(config)
        apis = KafkaApis(config, self.replicas)
        self.kafka = KafkaServer(
            apis.handle,
            host=config.broker.host,
            port=config.broker.kafka_port,
            max_request_bytes=config.broker.socket_request_max_bytes,
            max_connections=config.broker.max_connections,
            advertised_versions=ADVERTISED_VERSIONS,
        )
        await self.kafka.start()
        apis.advertised_port = self.kafka.port
        self.replicas.start_background_tasks()
        _write_json_atomically(
            ready_path,
            {
                "node_id": config.node.id,
                "pid": os.getpid(),
                "host": config.advertised_host,
                "kafka_port": self.kafka.port,
                "bootstrap_servers": f"{config.advertised_host}:{self.kafka.port}",
            },
        )
        log.info(
            "node %d serving Kafka on %s:%d (data in %s)",
            config.node.id,
            config.broker.host,
            self.kafka.port,
            config.data_dir,
        )

    async def stop(self) -> None:
        (self.config.data_dir / READY_FILE).unlink(missing_ok=True)
        if self.kafka is not None:
            await self.kafka.stop()
        if self.replicas is not None:
            await self.replicas.close()
        log.info("node %d stopped", self.config.node.id)


async def _main(config: NodeConfig) -> None:
    node = Node(config)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await node.start()
    try:
        await stopping.wait()
    finally:
        await node.stop()


def run_node(config: NodeConfig) -> None:
    """Run a node in this process until SIGTERM/SIGINT."""
    logging.basicConfig(
        level=config.node.log_level,
        format=f"%(asctime)s %(levelname)s %(name)s [node {config.node.id}] %(message)s",
    )
    try:
        import uvloop
    except ImportError:  # uvloop is optional: plain asyncio is correct, only slower
        asyncio.run(_main(config))
    else:
        uvloop.run(_main(config))


def _write_json_atomically(path: Path, document: dict[str, object]) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(document))
    os.replace(temporary, path)
