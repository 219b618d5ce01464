"""Transactions with unmodified Kafka clients: confluent-kafka's transactional producer commits
and aborts across partitions of two topics, ``read_committed`` consumers see exactly the
committed records (``read_uncommitted`` ones see both), the last stable offset holds readers
back while a transaction is open, an old producer with the same transactional id is fenced,
and a transaction left open past its timeout is aborted by the coordinator."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.integration.cluster_helpers import create_topic, partitions
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration


def _producer(bootstrap: str, transactional_id: str, **extra: object):
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 1,
            **extra,
        }
    )
    producer.init_transactions(30)
    return producer


def _read_all(bootstrap: str, topics: dict[str, int], isolation: str, expect: int | None = None):
    """Every value of the topics' partitions as one consumer with ``isolation`` reads them,
    until ``expect`` values arrived (or the partitions' ends, for read_committed, at the LSO)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{isolation}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    assignment = [TopicPartition(t, p, 0) for t, count in topics.items() for p in range(count)]
    consumer.assign(assignment)
    values: list[bytes] = []
    at_end: set[tuple[str, int]] = set()
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                if message.error() is not None:
                    if message.error().code() == -191:  # _PARTITION_EOF
                        at_end.add((message.topic(), message.partition()))
                        continue
                    raise AssertionError(message.error())
                values.append(message.value())
            if expect is not None and len(values) >= expect:
                break
            if expect is None and len(at_end) == len(assignment):
                break
    finally:
        consumer.close()
    return values


def test_commit_and_abort_across_two_topics(cluster_factory) -> None:
    nodes = cluster_factory(3)
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    create_topic(nodes[0], "tx-a", 2, 3)
    create_topic(nodes[0], "tx-b", 1, 3)
    producer = _producer(bootstrap, "app-1")
    for round_, commit in enumerate([True, False, True, False, True]):
        producer.begin_transaction()
        for i in range(30):
            value = b"r%d-%d-%s" % (round_, i, b"c" if commit else b"a")
            producer.produce("tx-a", value=value, partition=i % 2)
            producer.produce("tx-b", value=value, partition=0)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)  # in the log first (an abort purges what was not sent)
            producer.abort_transaction(30)
    committed = _read_all(bootstrap, {"tx-a": 2, "tx-b": 1}, "read_committed")
    counts = Counter(value[-1:] for value in committed)
    assert counts == {b"c": 3 * 60}, counts  # every committed record, none aborted
    assert len(committed) == 180  # each once
    everything = _read_all(bootstrap, {"tx-a": 2, "tx-b": 1}, "read_uncommitted", expect=300)
    assert Counter(value[-1:] for value in everything) == {b"c": 180, b"a": 120}


def test_an_open_transaction_holds_read_committed_readers_back(cluster_factory) -> None:
    nodes = cluster_factory(3)
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    create_topic(nodes[0], "tx-lso", 1, 3)
    plain = _producer(bootstrap, "plain-before")
    plain.begin_transaction()
    plain.produce("tx-lso", value=b"first")
    plain.commit_transaction(30)
    open_txn = _producer(bootstrap, "held-open")
    open_txn.begin_transaction()
    open_txn.produce("tx-lso", value=b"pending")
    open_txn.flush(30)  # in the log, not committed
    # ListOffsets(read_committed) answers the last stable offset: the pending record's
    # (after "first" and its commit marker).
    assert _stable_end(bootstrap, "tx-lso") == 2
    assert _read_all(bootstrap, {"tx-lso": 1}, "read_committed") == [b"first"]
    open_txn.commit_transaction(30)
    assert _read_all(bootstrap, {"tx-lso": 1}, "read_committed") == [b"first", b"pending"]


def test_a_zombie_producer_is_fenced(cluster_factory) -> None:
    from confluent_kafka import KafkaException

    nodes = cluster_factory(3)
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    create_topic(nodes[0], "tx-z", 1, 3)
    zombie = _producer(bootstrap, "shared-id")
    zombie.begin_transaction()
    zombie.produce("tx-z", value=b"zombie")
    zombie.flush(30)
    successor = _producer(bootstrap, "shared-id")  # aborts the zombie's open transaction
    successor.begin_transaction()
    successor.produce("tx-z", value=b"successor")
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as caught:
        zombie.commit_transaction(30)
    error = caught.value.args[0]
    assert error.fatal() or "fenced" in error.str().lower(), error
    assert _read_all(bootstrap, {"tx-z": 1}, "read_committed") == [b"successor"]


def test_a_transaction_open_past_its_timeout_is_aborted(cluster_factory) -> None:
    from confluent_kafka import KafkaException

    nodes = cluster_factory(3)
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    create_topic(nodes[0], "tx-t", 1, 3)
    producer = _producer(bootstrap, "slow", **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    producer.produce("tx-t", value=b"late")
    producer.flush(30)
    # The coordinator aborts it (epoch bumped): the log gets an abort marker, so the last
    # stable offset passes the record and the marker, and read_committed readers reach the
    # end without the record.
    wait_until(lambda: _stable_end(bootstrap, "tx-t") == 2, timeout_s=30)
    assert _read_all(bootstrap, {"tx-t": 1}, "read_committed") == []
    assert _read_all(bootstrap, {"tx-t": 1}, "read_uncommitted", expect=1) == [b"late"]
    with pytest.raises(KafkaException) as caught:
        producer.commit_transaction(10)
    assert caught.value.args[0].fatal()  # fenced by the bumped epoch


def _stable_end(bootstrap: str, topic: str) -> int:
    """The last stable offset of partition 0 (ListOffsets with read_committed)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "lso", "isolation.level": "read_committed"}
    )
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def test_admin_reads_describe_list_and_producers(cluster_factory) -> None:
    """DescribeTransactions at the id's coordinator, ListTransactions at every broker (each
    lists what it coordinates) and DescribeProducers at the partition's leader, while a
    transaction is open and after it committed."""
    from flux.protocol.api import ApiKey
    from flux.protocol.errors import ErrorCode
    from flux.sdk.wire import KafkaConnection

    from tests.integration.cluster_helpers import partitions

    nodes = cluster_factory(3)
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    create_topic(nodes[0], "tx-admin", 1, 3)
    producer = _producer(bootstrap, "admin-app")
    producer.begin_transaction()
    producer.produce("tx-admin", value=b"x")
    producer.flush(30)

    def ask(node_id: int, api: int, version: int, body: dict) -> dict:
        node = next(n for n in nodes if n.node_id == node_id)
        with KafkaConnection.from_bootstrap(node.bootstrap_servers, timeout_s=10) as conn:
            return conn.request(api, version, body)

    found = ask(nodes[0].node_id, ApiKey.FIND_COORDINATOR, 4,
                {"key_type": 1, "coordinator_keys": ["admin-app", "nobody"]})  # fmt: skip
    coordinator, nobodys = (entry["node_id"] for entry in found["coordinators"])
    unknown = ask(nobodys, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["nobody"]})
    assert unknown["transaction_states"][0]["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

    def describe() -> dict:
        answer = ask(coordinator, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                     {"transactional_ids": ["admin-app"]})  # fmt: skip
        return answer["transaction_states"][0]

    running = describe()
    assert running["error_code"] == ErrorCode.NONE
    assert running["transaction_state"] == "Ongoing"
    assert running["topics"] == [{"topic": "tx-admin", "partitions": [0]}]
    other = next(n.node_id for n in nodes if n.node_id != coordinator)
    elsewhere = ask(other, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["admin-app"]})
    assert elsewhere["transaction_states"][0]["error_code"] == ErrorCode.NOT_COORDINATOR

    def listed(**filters) -> list[tuple[str, str]]:
        body = {"state_filters": [], "producer_id_filters": [], **filters}
        answers = [ask(n.node_id, ApiKey.LIST_TRANSACTIONS, 1, body) for n in nodes]
        return sorted(
            (s["transactional_id"], s["transaction_state"])
            for a in answers
            for s in a["transaction_states"]
        )

    assert listed() == [("admin-app", "Ongoing")]
    assert listed(state_filters=["CompleteCommit"]) == []
    assert listed(producer_id_filters=[running["producer_id"]]) == [("admin-app", "Ongoing")]
    bogus = ask(nodes[0].node_id, ApiKey.LIST_TRANSACTIONS, 0,
                {"state_filters": ["Bogus"], "producer_id_filters": []})  # fmt: skip
    assert bogus["unknown_state_filters"] == ["Bogus"]

    leader = partitions(nodes[0], "tx-admin")[0]["leader_id"]

    def producers() -> list[dict]:
        answer = ask(leader, ApiKey.DESCRIBE_PRODUCERS, 0,
                     {"topics": [{"name": "tx-admin", "partition_indexes": [0]}]})  # fmt: skip
        partition = answer["topics"][0]["partitions"][0]
        assert partition["error_code"] == ErrorCode.NONE
        return partition["active_producers"]

    [active] = producers()
    assert (active["producer_id"], active["current_txn_start_offset"]) == (
        running["producer_id"],
        0,
    )
    assert active["coordinator_epoch"] == -1  # no marker yet
    producer.commit_transaction(30)
    assert describe()["transaction_state"] == "CompleteCommit"
    assert listed(state_filters=["CompleteCommit"]) == [("admin-app", "CompleteCommit")]
    [committed] = producers()
    assert committed["current_txn_start_offset"] == -1
    # The commit marker's writer: the leader epoch of the id's __transaction_state partition.
    from flux.cluster.transactions.state import partition_for_txn

    states = partitions(nodes[0], "__transaction_state")
    owner = states[partition_for_txn("admin-app", len(states))]
    assert owner["leader_id"] == coordinator
    assert committed["coordinator_epoch"] == owner["leader_epoch"]


def test_offsets_of_an_open_transaction_are_unstable_and_generations_are_checked(
    cluster_factory,
) -> None:
    """OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for a partition whose
    offsets wait in an open transaction (KIP-447), and TxnOffsetCommit v3 checks the member's
    generation like OffsetCommit."""
    from confluent_kafka import Consumer, TopicPartition
    from flux.protocol.api import ApiKey
    from flux.protocol.errors import ErrorCode
    from flux.sdk.wire import KafkaConnection

    nodes = cluster_factory(3)
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    create_topic(nodes[0], "tx-in", 1, 3)
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": "tx-group"})
    producer = _producer(bootstrap, "offsets-app")
    producer.begin_transaction()
    producer.produce("tx-in", value=b"x")
    producer.send_offsets_to_transaction(
        [TopicPartition("tx-in", 0, 7)], group.consumer_group_metadata(), 30
    )

    def coordinator_request(api: int, version: int, body: dict) -> dict:
        with KafkaConnection.from_bootstrap(nodes[0].bootstrap_servers, timeout_s=10) as conn:
            found = conn.request(ApiKey.FIND_COORDINATOR, 1, {"key": "tx-group", "key_type": 0})
        node = next(n for n in nodes if n.node_id == found["node_id"])
        with KafkaConnection.from_bootstrap(node.bootstrap_servers, timeout_s=10) as conn:
            return conn.request(api, version, body)

    def fetched(require_stable: bool) -> tuple[int, int]:
        answer = coordinator_request(
            ApiKey.OFFSET_FETCH, 7,
            {"group_id": "tx-group", "topics": [{"name": "tx-in", "partition_indexes": [0]}],
             "require_stable": require_stable},
        )  # fmt: skip
        partition = answer["topics"][0]["partitions"][0]
        return partition["error_code"], partition["committed_offset"]

    assert fetched(True)[0] == ErrorCode.UNSTABLE_OFFSET_COMMIT
    assert fetched(False) == (ErrorCode.NONE, -1)  # the old answer: nothing committed yet
    producer.commit_transaction(30)
    assert fetched(True) == (ErrorCode.NONE, 7)
    stale = coordinator_request(
        ApiKey.TXN_OFFSET_COMMIT, 3,
        {"transactional_id": "offsets-app", "group_id": "tx-group", "producer_id": 1,
         "producer_epoch": 0, "generation_id": 6, "member_id": "bogus-member",
         "group_instance_id": None,
         "topics": [{"name": "tx-in", "partitions": [
             {"partition_index": 0, "committed_offset": 99, "committed_leader_epoch": -1,
              "committed_metadata": None}]}]},
    )  # fmt: skip
    assert stale["topics"][0]["partitions"][0]["error_code"] == ErrorCode.ILLEGAL_GENERATION
    assert fetched(True) == (ErrorCode.NONE, 7)
    group.close()


def test_aborted_transactions_stay_hidden_after_a_whole_cluster_crash(cluster_factory) -> None:
    """Every node SIGKILLed after commits and aborts, one node's aborted-transaction index
    files deleted: the nodes rebuild the index from the log (the producer state's replay), so
    read_committed readers still skip every aborted record, and an open transaction still
    holds the last stable offset back until it ends."""
    nodes = cluster_factory(3)
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    create_topic(nodes[0], "tx-crash", 2, 3)
    producer = _producer(bootstrap, "crash-app")
    for round_, commit in enumerate([True, False, True, False]):
        producer.begin_transaction()
        for i in range(10):
            producer.produce("tx-crash", value=b"%d-%d-%s" % (round_, i, b"c" if commit else b"a"),
                             partition=i % 2)  # fmt: skip
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    before = sorted(_read_all(bootstrap, {"tx-crash": 2}, "read_committed"))
    assert len(before) == 20 and all(value.endswith(b"c") for value in before)
    for node in nodes:
        node.kill()
    indexes = list(nodes[0].data_dir.rglob("aborted-transactions.index"))
    assert indexes, "the aborted transactions were indexed"
    for index in indexes:
        index.unlink()
    for node in nodes:
        node.start()
    for node in nodes:
        node.wait_ready(60)
    wait_until(lambda: sorted(_read_all(bootstrap, {"tx-crash": 2}, "read_committed")) == before)
    # Every node holds the index again, rebuilt from its log (each may lead after a failover).
    # The nodes came back one by one, so the ISR may still be only the first to return: wait
    # for every replica to rejoin it, or killing two nodes would leave no clean leader.
    wait_until(lambda: all(len(p["isr_nodes"]) == 3 for p in partitions(nodes[0], "tx-crash")), 60)
    nodes[1].kill()
    nodes[2].kill()
    nodes[1].start()
    nodes[1].wait_ready(60)
    assert list(nodes[0].data_dir.rglob("aborted-transactions.index"))
    wait_until(lambda: sorted(_read_all(bootstrap, {"tx-crash": 2}, "read_committed")) == before)


def test_an_idle_transactional_id_expires_and_stays_removed_after_a_restart(
    cluster_factory,
) -> None:
    """``broker.transactional_id_expiration_ms``: an id whose transaction committed and that
    then stays idle is removed by its coordinator with a tombstone, so after every node is
    SIGKILLed and restarted the coordinator that loads its partition finds no id there; a
    producer with the id then starts afresh."""
    from flux.cluster.transactions.state import partition_for_txn

    nodes = cluster_factory(3, broker={"transactional_id_expiration_ms": 2000})
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    create_topic(nodes[0], "tx-expire", 1, 3)
    producer = _producer(bootstrap, "short-lived")
    producer.begin_transaction()
    producer.produce("tx-expire", value=b"first")
    producer.commit_transaction(30)

    def logged(pattern: str, since: dict[int, int]) -> str | None:
        for node in nodes:
            with open(node.log_path, "rb") as log:
                log.seek(since[node.node_id])
                for line in log.read().decode(errors="replace").splitlines():
                    if pattern in line:
                        return line
        return None

    start = {node.node_id: 0 for node in nodes}
    wait_until(lambda: logged("transactional id short-lived expired", start), timeout_s=30)
    marks = {node.node_id: node.log_path.stat().st_size for node in nodes}
    for node in nodes:
        node.kill()
    for node in nodes:
        node.start()
    for node in nodes:
        node.wait_ready(60)
    index = partition_for_txn("short-lived", 12)  # broker.transaction_state_partitions
    loaded = wait_until(lambda: logged(f"coordinating __transaction_state-{index} ", marks), 60)
    assert loaded.endswith(": 0 transactional ids loaded"), loaded
    again = _producer(bootstrap, "short-lived")
    again.begin_transaction()
    again.produce("tx-expire", value=b"second")
    again.commit_transaction(30)
    assert sorted(_read_all(bootstrap, {"tx-expire": 1}, "read_committed")) == [b"first", b"second"]


def test_a_transactional_batch_for_a_partition_not_in_the_transaction_is_refused(
    cluster_factory,
) -> None:
    """KIP-890 part 1: a partition leader verifies a producer's first transactional batch with
    the id's coordinator (here on another broker). A batch for a partition never added with
    AddPartitionsToTxn, or arriving after its transaction ended (a zombie's late send), is
    refused with INVALID_TXN_STATE and appends nothing, so no transaction opens that would
    hold read_committed readers back for ever; an added partition takes it."""
    from flux.protocol.api import ApiKey
    from flux.protocol.errors import ErrorCode
    from flux.protocol.records import build_batch
    from flux.sdk.wire import KafkaConnection

    nodes = cluster_factory(3)
    by_id = {node.node_id: node for node in nodes}
    bootstrap = ",".join(node.bootstrap_servers for node in nodes)
    create_topic(nodes[0], "tx-verify", 3, 3)

    def ask(node_id: int, api: int, version: int, body: dict) -> dict:
        with KafkaConnection.from_bootstrap(by_id[node_id].bootstrap_servers, timeout_s=10) as c:
            return c.request(api, version, body)

    def coordinator() -> int | None:
        found = ask(nodes[0].node_id, ApiKey.FIND_COORDINATOR, 4,
                    {"key_type": 1, "coordinator_keys": ["rogue"]})["coordinators"][0]  # fmt: skip
        return found["node_id"] if found["error_code"] == ErrorCode.NONE else None

    txn_node = wait_until(coordinator, timeout_s=60)

    def init() -> dict | None:
        answer = ask(txn_node, ApiKey.INIT_PRODUCER_ID, 4,
                     {"transactional_id": "rogue", "transaction_timeout_ms": 60000})  # fmt: skip
        return answer if answer["error_code"] == ErrorCode.NONE else None

    initialized = wait_until(init, timeout_s=60)
    producer_id, epoch = initialized["producer_id"], initialized["producer_epoch"]
    leaders = {p["partition_index"]: p["leader_id"] for p in partitions(nodes[0], "tx-verify")}
    index = next(i for i, leader in sorted(leaders.items()) if leader != txn_node)

    def send(sequence: int, value: bytes) -> dict:
        batch = build_batch([(None, value, ())], producer_id=producer_id, producer_epoch=epoch,
                            base_sequence=sequence, is_transactional=True)  # fmt: skip
        answer = ask(leaders[index], ApiKey.PRODUCE, 8, {
            "transactional_id": "rogue", "acks": -1, "timeout_ms": 10000,
            "topic_data": [{"name": "tx-verify",
                            "partition_data": [{"index": index, "records": batch}]}],
        })  # fmt: skip
        return answer["responses"][0]["partition_responses"][0]

    refused = send(0, b"not added")
    assert refused["error_code"] == ErrorCode.INVALID_TXN_STATE, refused
    assert "AddPartitionsToTxn" in refused["error_message"]
    added = ask(txn_node, ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": "rogue", "v3_and_below_producer_id": producer_id,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": "tx-verify", "partitions": [index]}],
    })  # fmt: skip
    [[result]] = [t["results_by_partition"] for t in added["results_by_topic_v3_and_below"]]
    assert result["partition_error_code"] == ErrorCode.NONE
    taken = send(0, b"added")
    assert (taken["error_code"], taken["base_offset"]) == (ErrorCode.NONE, 0), taken
    ended = ask(txn_node, ApiKey.END_TXN, 3, {"transactional_id": "rogue",
                "producer_id": producer_id, "producer_epoch": epoch, "committed": True})  # fmt: skip
    assert ended["error_code"] == ErrorCode.NONE
    late = send(1, b"late")
    assert late["error_code"] == ErrorCode.INVALID_TXN_STATE, late
    # Nothing of the refused batches is in the log, and no transaction holds readers back.
    assert _read_all(bootstrap, {"tx-verify": 3}, "read_committed") == [b"added"]
    assert _read_all(bootstrap, {"tx-verify": 3}, "read_uncommitted") == [b"added"]
