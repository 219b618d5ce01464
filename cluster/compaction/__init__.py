"""Log compaction on a broker: the background cleaner that runs ``flux.storage.compaction`` on
the partitions of compacted topics, and the record codec it decodes batches with.

- ``codec``: ``RecordsCodec`` (record keys and filtered batches, from ``flux.protocol``).
- ``service``: ``LogCleanerService``, the node's cleaner: picks the dirtiest log, cleans it on
  a worker thread, swaps the result in on the event loop, exports its figures.
"""
