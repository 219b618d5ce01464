"""``fluxctl produce`` and ``fluxctl consume``: send and read records from the shell.

fluxctl produce orders --key order-17 paid shipped      two records with the same key
printf 'a\\nb\\n' | fluxctl produce orders               one record per stdin line
fluxctl consume orders --from-beginning --max 10 [--json]
fluxctl consume orders                                   new records until --idle-timeout

``consume`` prints one record per line: the value (UTF-8, undecodable bytes escaped), or with
``--json`` one object per line: ``{"topic", "partition", "offset", "timestamp", "key",
"value", "headers"}`` with keys, values and header values as UTF-8 strings (``null`` when
absent; bytes that are not UTF-8 are escaped with backslashes).
"""

from __future__ import annotations

import json
import time
from typing import Any

import click
from flux.sdk.simple import ConsumedRecord, SimpleConsumer, SimpleProducer

from ._sdk import client_options, json_option, resolve_bootstrap, sdk_errors

__all__ = ["consume", "produce"]

_POLL_WAIT_MS = 500


@click.command()
@click.argument("topic_name", metavar="TOPIC")
@click.argument("values", nargs=-1)
@click.option("--key", "-k", default=None, help="key of every record (partition by murmur2)")
@click.option("--header", "-H", "headers", multiple=True, metavar="NAME=VALUE")
@click.option("--partition", "-p", type=int, default=None, help="send to this partition")
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="1", show_default=True)
@client_options
@json_option
def produce(
    topic_name: str,
    values: tuple[str, ...],
    key: str | None,
    headers: tuple[str, ...],
    partition: int | None,
    acks: str,
    bootstrap: str | None,
    timeout_s: float,
    as_json: bool,
) -> None:
    """Send VALUES (or each line of stdin) as records to TOPIC."""
    header_pairs = []
    for header in headers:
        name, sep, value = header.partition("=")
        if not sep or not name:
            raise click.UsageError(f"--header expects NAME=VALUE, got {header!r}")
        header_pairs.append((name, value.encode("utf-8")))
    lines = list(values) or [line.rstrip("\n") for line in click.get_text_stream("stdin")]
    acks_number = -1 if acks in ("all", "-1") else int(acks)
    with (
        sdk_errors(),
        SimpleProducer(
            resolve_bootstrap(bootstrap),
            acks=acks_number,
            client_id="fluxctl",
            timeout_s=timeout_s,
        ) as producer,
    ):
        for line in lines:
            sent = producer.send(
                topic_name, line, key=key, headers=header_pairs, partition=partition
            )
            if as_json:
                click.echo(json.dumps({"partition": sent.partition, "offset": sent.offset}))
            else:
                click.echo(f"{sent.topic}-{sent.partition}@{sent.offset}")


@click.command()
@click.argument("topic_name", metavar="TOPIC")
@click.option("--from-beginning", is_flag=True, help="start at the log start, not the end")
@click.option("--max", "max_records", type=click.IntRange(min=1), default=None)
@click.option(
    "--idle-timeout",
    type=click.FloatRange(min=0),
    default=None,
    help="stop after this many seconds without a new record "
    "[default: 0 with --from-beginning (read what is there), else wait forever]",
)
@client_options
@json_option
def consume(
    topic_name: str,
    from_beginning: bool,
    max_records: int | None,
    idle_timeout: float | None,
    bootstrap: str | None,
    timeout_s: float,
    as_json: bool,
) -> None:
    """Print records of every partition of TOPIC."""
    if idle_timeout is None:
        idle_timeout = 0.0 if from_beginning else float("inf")
    printed = 0
    with (
        sdk_errors(),
        SimpleConsumer(
            resolve_bootstrap(bootstrap), client_id="fluxctl", timeout_s=timeout_s
        ) as consumer,
    ):
        positions = (
            consumer.earliest_offsets(topic_name)
            if from_beginning
            else consumer.high_watermarks(topic_name)
        )
        last_record_at = time.monotonic()
        while max_records is None or printed < max_records:
            got_any = False
            for partition, position in sorted(positions.items()):
                wait_ms = 0 if idle_timeout == 0 else _POLL_WAIT_MS // max(1, len(positions))
                records = consumer.fetch(topic_name, partition, position, max_wait_ms=wait_ms)
                for record in records:
                    if max_records is not None and printed >= max_records:
                        break
                    _print_record(record, as_json)
                    printed += 1
                    positions[partition] = record.offset + 1
                    got_any = True
            if got_any:
                last_record_at = time.monotonic()
            elif time.monotonic() - last_record_at >= idle_timeout:
                break


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def _print_record(record: ConsumedRecord, as_json: bool) -> None:
    if not as_json:
        click.echo(_text(record.value) or "")
        return
    data: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": _text(record.key),
        "value": _text(record.value),
        "headers": [[name, _text(value)] for name, value in record.headers],
    }
    click.echo(json.dumps(data))
