"""Fault testing after Jepsen (DESIGN.md §11, docs/chaos.md): workloads record every operation
into a history, a nemesis injects faults on a seeded schedule, and the checker names the
anomalies it finds.

Modules: ``history`` (ops, JSON Lines), ``clients`` and ``workloads`` (confluent-kafka and
``flux.sdk`` drivers; ``group_member`` runs one group member per process), ``nemesis`` (the
``ClusterControl`` interface backends implement, schedules, the executor), ``scenarios``,
``checker``, ``replicas`` (every replica's log read back after a run), ``report`` and
``runner`` (``run_scenario``, the entry point of pytest and ``fluxctl chaos``); ``partitions``
(partition shapes and the packet filter rules that make them, pure), ``netns`` (the network
namespaces local nodes run in to be partitioned) and ``clock_shim`` (wall-clock jumps of one
node). ``flux.chaos`` imports only ``flux.sdk`` and ``flux.protocol`` of ours: the process
backend that drives local node processes lives in ``flux.cli.chaos``, and the nemesis's planner
rebalance runs ``fluxctl cluster rebalance`` as a child process rather than importing the
controller.
"""
