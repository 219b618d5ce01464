"""The FLUX V1 line protocol as a second front door (docs/v1-protocol.md).

- ``protocol``: request parsing, reply lines, the FNV-1a partitioner (pure).
- ``commands``: what each command does, on the same partitions, group coordinator and
  controller as the Kafka front door.
- ``server``: the listener (``[v1] port``, off by default): pipelined connections answered in
  request order, bounded line length and requests in flight.
"""
