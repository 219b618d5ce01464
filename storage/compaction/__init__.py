"""Log compaction (``cleanup.policy=compact``): keep the newest record per key.

Kafka's log cleaner, for one partition log at a time:

- ``planner``: pure rules. Which part of a log may be cleaned (closed segments wholly below
  the high watermark and older than ``min.compaction.lag.ms``), whether it is worth it
  (``min.cleanable.dirty.ratio``, ``max.compaction.lag.ms``), the bounded key map
  (``DedupeMap``) and which records of a batch survive.
- ``cleaner``: one clean of one log. The map pass over the dirty part and the rewrite of the
  cleanable segments into ``.cleaning/`` run on any thread (they read the segment files through
  their own descriptors); ``commit`` swaps the result in on the log's owner thread.
- ``swap``: the files. A cleaned segment becomes the truth when it is renamed to
  ``<base>.log.swap``; the old segments are then deleted and the swap file renamed to
  ``<base>.log``. ``complete_swaps`` finishes (or forgets) an interrupted swap when the log
  is opened, so a crash at any step leaves the old segments or the new one, never a mix.

Batches keep their offset spans: a batch losing some records keeps its base offset and
``lastOffsetDelta`` (as Kafka's cleaner does), and consecutive batches losing all their records
become one empty batch spanning them (unless one of them is a producer's last batch, whose
header is kept for idempotence). So a compacted log is still a contiguous run of batches: the
log's invariants, recovery, truncation, replication and fetch need no special case. A follower
whose position lies inside an empty span is served the span from its position
(``align_to``). Records are decoded by a ``RecordCodec`` the caller passes (``flux.storage``
imports nothing else of Flux).
"""

from flux.storage.compaction.batches import align_to
from flux.storage.compaction.cleaner import CleanResult, LogCleaner
from flux.storage.compaction.planner import CleanPlan, DedupeMap, RecordCodec, plan_clean
from flux.storage.compaction.swap import complete_swaps

__all__ = [
    "CleanPlan",
    "CleanResult",
    "DedupeMap",
    "LogCleaner",
    "RecordCodec",
    "align_to",
    "complete_swaps",
    "plan_clean",
]
