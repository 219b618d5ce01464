"""Named bounds and defaults of the Flux client, kept together (STYLE.md: limits on everything).

Every retry loop, buffer and request size in ``flux.sdk`` is bounded by one of these; a caller
that asks for more gets a ``ConfigurationError``.
"""

from __future__ import annotations

__all__ = [
    "BATCH_BYTES_MAX",
    "BOOTSTRAP_ADDRESSES_MAX",
    "BUFFER_BYTES_MAX",
    "CONNECTION_PENDING_MAX",
    "CONNECT_TIMEOUT_S",
    "FETCH_BYTES_MAX",
    "FETCH_WAIT_MS_MAX",
    "FRAME_BYTES_MAX",
    "HANDLER_ATTEMPTS_MAX",
    "IN_FLIGHT_REQUESTS_MAX",
    "LINGER_MS_MAX",
    "MESSAGE_BYTES_MAX",
    "METADATA_MAX_AGE_S",
    "REQUEST_TIMEOUT_S",
    "RETRY_ATTEMPTS_DEFAULT",
    "RETRY_ATTEMPTS_MAX",
    "RETRY_BACKOFF_INITIAL_S",
    "RETRY_BACKOFF_MAX_S",
    "RETRY_TIMEOUT_MAX_S",
    "RETRY_TIMEOUT_S",
    "SCRAM_ALTERATIONS_MAX",
    "POLL_RECORDS_MAX",
    "SEND_BATCH_RECORDS_MAX",
    "TABLE_KEYS_DEFAULT",
    "TABLE_KEYS_MAX",
    "TRANSACTION_TIMEOUT_MS_DEFAULT",
    "TRANSACTION_TIMEOUT_MS_MAX",
    "UNKNOWN_TOPIC_RETRY_TIMEOUT_S",
]

#: At most this many ``host:port`` entries in a bootstrap string.
BOOTSTRAP_ADDRESSES_MAX = 64

#: Opening a TCP connection to a broker gives up after this long.
CONNECT_TIMEOUT_S = 10.0
#: Waiting for one response gives up after this long (a long-polling fetch adds its wait).
REQUEST_TIMEOUT_S = 30.0

#: A retried operation makes at most this many attempts by default (enough that the time
#: limit below normally decides: with the backoffs below, 30 s hold about 35 attempts) ...
RETRY_ATTEMPTS_DEFAULT = 50
#: ... and gives up when this much time has passed since its first attempt.
RETRY_TIMEOUT_S = 30.0
#: Upper bounds a ``RetryPolicy`` may be configured with.
RETRY_ATTEMPTS_MAX = 1000
RETRY_TIMEOUT_MAX_S = 3600.0
#: Backoff before the second attempt; it doubles per attempt up to ``RETRY_BACKOFF_MAX_S``.
RETRY_BACKOFF_INITIAL_S = 0.05
RETRY_BACKOFF_MAX_S = 1.0
#: UNKNOWN_TOPIC_OR_PARTITION is retried only this long: long enough for a just-created topic
#: to reach every broker's metadata, short enough that a typo fails fast.
UNKNOWN_TOPIC_RETRY_TIMEOUT_S = 5.0

#: Cached metadata older than this is refreshed before it is used for routing.
METADATA_MAX_AGE_S = 300.0

#: Bounds of one fetch.
FETCH_BYTES_MAX = 64 << 20
FETCH_WAIT_MS_MAX = 60_000

#: ``SimpleProducer.send_batch`` sends at most this many records in one batch.
SEND_BATCH_RECORDS_MAX = 100_000

#: A response frame larger than this is refused (the fetch bound plus room for headers).
FRAME_BYTES_MAX = FETCH_BYTES_MAX + (1 << 20)
#: At most this many requests wait for their answers on one connection at once.
CONNECTION_PENDING_MAX = 1024

#: Producer bounds: how long a batch may wait for more records, how large it may grow, how
#: large one record may be (``max_request_bytes`` defaults to ``MESSAGE_BYTES_DEFAULT``),
#: how many bytes of records may wait to be sent, and how many Produce requests may be in
#: flight at once over all partitions (each partition sends one batch at a time).
LINGER_MS_MAX = 60_000
BATCH_BYTES_MAX = 16 << 20
MESSAGE_BYTES_DEFAULT = 1 << 20
MESSAGE_BYTES_MAX = 64 << 20
BUFFER_BYTES_DEFAULT = 32 << 20
BUFFER_BYTES_MAX = 1 << 30
IN_FLIGHT_REQUESTS_DEFAULT = 64
IN_FLIGHT_REQUESTS_MAX = 10_000

#: A transactional producer's ``transaction_timeout_ms``: the coordinator aborts a transaction
#: open longer. The bound is Kafka's ``transaction.max.timeout.ms`` default, which Flux brokers
#: enforce too.
TRANSACTION_TIMEOUT_MS_DEFAULT = 60_000
TRANSACTION_TIMEOUT_MS_MAX = 900_000

#: Consumer bounds: records one poll may return; attempts of a failing ``run`` handler.
POLL_RECORDS_MAX = 100_000
HANDLER_ATTEMPTS_MAX = 1_000

#: ``Admin.alter_user_scram_credentials`` sends at most this many alterations at once.
SCRAM_ALTERATIONS_MAX = 1000

#: A table view (``flux.sdk.table``) holds at most ``max_keys`` keys in memory: this many by
#: default, and ``max_keys`` may be configured up to ``TABLE_KEYS_MAX``.
TABLE_KEYS_DEFAULT = 10_000_000
TABLE_KEYS_MAX = 1_000_000_000
