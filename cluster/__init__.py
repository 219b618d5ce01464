"""The broker: Kafka listener and request handlers, partitions (ReplicaManager), local topic
metadata, node process assembly and launcher.
"""
