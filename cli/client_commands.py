"""``fluxctl produce`` and ``fluxctl consume``: send and read records from the shell.

fluxctl produce orders --key order-17 paid shipped      two records with the same key
printf 'a\\nb\\n' | fluxctl produce orders               one record per stdin line
printf 'k1:a\\n' | fluxctl produce orders --key-separator :    key k1, value a
fluxctl produce orders --idempotent a b                 retries cannot write duplicates
fluxctl consume orders --from-beginning --max 10 [--json]   (--max-messages is the same)
fluxctl consume orders                                   new records until --idle-timeout
fluxctl consume orders --group billing                   as a group member, committing

``consume`` prints one record per line: the value (UTF-8, undecodable bytes escaped), or with
``--json`` one object per line: ``{"topic", "partition", "offset", "timestamp", "key",
"value", "headers"}`` with keys, values and header values as UTF-8 strings (``null`` when
absent; bytes that are not UTF-8 are escaped with backslashes).

Both take ``--bootstrap``, ``--timeout`` and the security options (``--security-protocol``,
``--sasl-*``, ``--ssl-*``, ``--client-config``; see ``flux.cli._sdk``). Both are built on
``flux.sdk``: ``Producer`` (acks 1 by default here, all with ``--idempotent``)
and ``Consumer`` (manual assignment of every partition, or a group member with ``--group``).

With ``--group`` the consumer joins the group, starts at the group's committed offsets (new
groups: the log start with ``--from-beginning``, else the end) and commits after printing
each batch, so the next ``consume --group`` goes on where this one stopped.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from typing import Any

import click
from flux.sdk import ConsumedRecord, Consumer, Message, Producer
from flux.sdk.security import ClientSecurity

from ._sdk import client_options, json_option, resolve_bootstrap, sdk_errors
from .progress import progress

__all__ = ["consume", "produce"]

_POLL_WAIT_MS = 500
#: Records handed to the producer at once by ``produce`` (its progress moves per slice).
_PRODUCE_SLICE = 1000
#: ``consume --group --from-beginning`` stops after this long without records by default.
_GROUP_IDLE_TIMEOUT_S = 1.0


@click.command()
@click.argument("topic_name", metavar="TOPIC")
@click.argument("values", nargs=-1)
@click.option("--key", "-k", default=None, help="key of every record (partition by murmur2)")
@click.option("--header", "-H", "headers", multiple=True, metavar="NAME=VALUE")
@click.option("--partition", "-p", type=int, default=None, help="send to this partition")
@click.option(
    "--acks",
    type=click.Choice(["0", "1", "all", "-1"]),
    default=None,
    help="[default: 1, or all with --idempotent]",
)
@click.option(
    "--key-separator",
    default=None,
    metavar="SEP",
    help="split each value at the first SEP into key and value",
)
@click.option("--idempotent", is_flag=True, help="number batches so retries never duplicate")
@click.option(
    "--file",
    "-f",
    "source",
    type=click.File("r", encoding="utf-8"),
    default=None,
    help="one record per line of this file (- for stdin) instead of VALUES",
)
@client_options
@json_option
def produce(
    topic_name: str,
    values: tuple[str, ...],
    key: str | None,
    headers: tuple[str, ...],
    partition: int | None,
    acks: str | None,
    key_separator: str | None,
    idempotent: bool,
    source: Any,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
    as_json: bool,
) -> None:
    """Send VALUES (or each line of --file, or of stdin) as records to TOPIC."""
    if key_separator == "":
        raise click.UsageError("--key-separator must not be empty")
    if key_separator is not None and key is not None:
        raise click.UsageError("--key and --key-separator exclude each other")
    if idempotent and acks not in (None, "all", "-1"):
        raise click.UsageError("--idempotent needs --acks all")
    header_pairs = []
    for header in headers:
        name, sep, value = header.partition("=")
        if not sep or not name:
            raise click.UsageError(f"--header expects NAME=VALUE, got {header!r}")
        header_pairs.append((name, value.encode("utf-8")))
    if source is not None and values:
        raise click.UsageError("VALUES and --file exclude each other")
    lines = list(values) or [line.rstrip("\n") for line in (source or sys.stdin)]
    records = [_split_key(line, key, key_separator) for line in lines]
    if acks is None:
        acks = "all" if idempotent else "1"
    messages = [
        Message(value, key=record_key, headers=header_pairs, partition=partition)
        for record_key, value in records
    ]
    if not messages:
        return
    with (
        sdk_errors(),
        Producer(
            resolve_bootstrap(bootstrap),
            acks=acks,
            idempotent=idempotent,
            client_id="fluxctl",
            delivery_timeout_ms=timeout_s * 1000,
            security=security,
        ) as producer,
        progress(f"producing to {topic_name}", len(messages), as_json=as_json) as advance,
    ):
        # Sent in slices, so the progress moves (each slice is still batched per partition).
        for start in range(0, len(messages), _PRODUCE_SLICE):
            for sent in producer.send(topic_name, messages[start : start + _PRODUCE_SLICE]):
                if as_json:
                    click.echo(json.dumps({"partition": sent.partition, "offset": sent.offset}))
                else:
                    click.echo(f"{sent.topic}-{sent.partition}@{sent.offset}")
                advance()


def _split_key(line: str, key: str | None, separator: str | None) -> tuple[str | None, str]:
    if separator is None:
        return key, line
    record_key, found, value = line.partition(separator)
    if not found:
        raise click.UsageError(f"no key separator {separator!r} in line {line!r}")
    return record_key, value


@click.command()
@click.argument("topic_name", metavar="TOPIC")
@click.option("--from-beginning", is_flag=True, help="start at the log start, not the end")
@click.option("--max", "--max-messages", "max_records", type=click.IntRange(min=1), default=None)
@click.option(
    "--idle-timeout",
    type=click.FloatRange(min=0),
    default=None,
    help="stop after this many seconds without a new record "
    "[default: 0 with --from-beginning (read what is there; 1 with --group), "
    "else wait forever]",
)
@click.option("--group", "-g", "group_id", default=None, help="consume as a member of this group")
@client_options
@json_option
def consume(
    topic_name: str,
    from_beginning: bool,
    max_records: int | None,
    idle_timeout: float | None,
    group_id: str | None,
    bootstrap: str | None,
    timeout_s: float,
    security: ClientSecurity,
    as_json: bool,
) -> None:
    """Print records of every partition of TOPIC."""
    if group_id is not None:
        if idle_timeout is None:
            idle_timeout = _GROUP_IDLE_TIMEOUT_S if from_beginning else float("inf")
        _consume_group(
            topic_name,
            group_id,
            from_beginning=from_beginning,
            max_records=max_records,
            idle_timeout_s=idle_timeout,
            bootstrap=resolve_bootstrap(bootstrap),
            timeout_s=timeout_s,
            security=security,
            as_json=as_json,
        )
        return
    if idle_timeout is None:
        idle_timeout = 0.0 if from_beginning else float("inf")
    with (
        sdk_errors(),
        Consumer(
            resolve_bootstrap(bootstrap),
            client_id="fluxctl",
            read_old=from_beginning,
            timeout_s=timeout_s,
            fetch_max_wait_ms=_POLL_WAIT_MS,
            security=security,
        ) as consumer,
        contextlib.ExitStack() as stack,
    ):
        partitions = consumer.assign_topic(topic_name)
        # "Read what is there": the end offsets now; with --idle-timeout 0 reading stops there.
        ends = consumer.end_offsets(topic_name)
        printed = 0
        advance = stack.enter_context(
            progress(f"consuming {topic_name}", max_records, as_json=as_json)
        )
        last_record_at = time.monotonic()
        while max_records is None or printed < max_records:
            if idle_timeout == 0 and all(
                consumer.position(tp) >= ends[tp.partition] for tp in partitions
            ):
                break
            remaining = None if max_records is None else max_records - printed
            records = consumer.poll(
                timeout_s=_POLL_WAIT_MS / 1000, max_records=min(remaining or 500, 500)
            )
            for record in records:
                _print_record(record, as_json)
            printed += len(records)
            advance(len(records))
            now = time.monotonic()
            if records:
                last_record_at = now
            elif idle_timeout and now - last_record_at >= idle_timeout:
                break


def _consume_group(
    topic_name: str,
    group_id: str,
    *,
    from_beginning: bool,
    max_records: int | None,
    idle_timeout_s: float,
    security: ClientSecurity,
    bootstrap: str,
    timeout_s: float,
    as_json: bool,
) -> None:
    """Poll as a group member, print, commit; stop at ``max_records`` or when idle. The idle
    clock starts once the member has joined (the first poll returned)."""
    printed = 0
    with (
        sdk_errors(),
        Consumer(
            bootstrap,
            group_id=group_id,
            topics=[topic_name],
            client_id="fluxctl",
            read_old=from_beginning,
            timeout_s=timeout_s,
            fetch_max_wait_ms=_POLL_WAIT_MS,
            security=security,
        ) as consumer,
        progress(f"consuming {topic_name} as {group_id}", max_records, as_json=as_json) as advance,
    ):
        last_record_at: float | None = None
        while max_records is None or printed < max_records:
            remaining = None if max_records is None else max_records - printed
            records = consumer.poll(
                timeout_s=_POLL_WAIT_MS / 1000, max_records=min(remaining or 500, 500)
            )
            now = time.monotonic()
            if records:
                for record in records:
                    _print_record(record, as_json)
                printed += len(records)
                advance(len(records))
                consumer.commit()
                last_record_at = now
            elif last_record_at is None:
                last_record_at = now
            elif now - last_record_at >= idle_timeout_s:
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
