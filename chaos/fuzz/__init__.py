"""Structure-aware fuzzing of every front door of a live cluster (docs/chaos.md, "Fuzzing").

Pure parts (seeded, no I/O): ``context`` (what the fuzzer knows of the cluster),
``kafka_requests`` (valid requests for every API and version of the codec, built from its
schemas, as tokens), ``mutate`` (structure-aware mutation of those tokens and of record
batches, frame-level lies and garbage: ``kafka_case``), ``http_cases`` (the HTTP API) and
``replication_cases`` (the replication WebSocket and internal endpoints).

I/O: ``runner`` starts or attaches to a cluster, sends the cases, judges each answer (error,
closed connection, never a hang), checks the nodes stay alive and a well-behaved client still
gets right answers, and at the end that no log, offset or metadata changed except by the
fuzzer's own accepted requests. ``benchmarks/fuzz.py`` is its command line.
"""
