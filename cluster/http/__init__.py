"""The broker's HTTP side: the listener, the HTTP API, and the features served through it.

``server`` (``BrokerHttpServer``: ``/health``, ``/ping``, replication fetch, the API's routes),
``api`` (``HttpApi``: routes, JSON wrapper, ``/metrics``), ``flux_api`` (the original Flux API:
publish, subscribe, unsubscribe, push subscriptions), ``rest`` (topics, messages, groups,
cluster, internal endpoints), ``common`` (what both halves share), ``push`` (webhook and
WebSocket deliveries), ``memory_topics`` (memory-topic cleanup), ``dedup`` (message-id
deduplication), ``metrics`` (Prometheus metrics).
"""
