"""The Flux Python client, built on flux.protocol. Today: `flux.sdk.wire.KafkaConnection`, a
blocking one-request-at-a-time connection used by fluxctl, tests and benchmarks.
"""
