"""Named upper bounds of ``flux.storage`` (TIGER_STYLE: limits on everything, in one place)."""

from __future__ import annotations

__all__ = [
    "MAX_SEGMENT_BYTES",
    "MAX_APPEND_BYTES",
    "MAX_BATCHES_PER_APPEND",
    "MAX_RELATIVE_OFFSET",
    "RECOVERY_READ_BYTES",
    "HEADER_SCAN_READ_BYTES",
    "TAIL_CACHE_BYTES",
    "TAIL_CACHE_APPENDS",
]

# Index entries store file positions as uint32; keeping segment_bytes and one
# append below 2 GiB each bounds a segment below 4 GiB (a segment holds at most
# segment_bytes plus one append, because we roll *before* an append).
MAX_SEGMENT_BYTES = (1 << 31) - 1
MAX_APPEND_BYTES = (1 << 31) - 1

# One produce request cannot make us track an unbounded list of batches.
MAX_BATCHES_PER_APPEND = 1 << 20

# Index entries store offsets relative to the segment base as uint32; like
# Kafka we roll before a segment would span more than Int.MaxValue offsets.
MAX_RELATIVE_OFFSET = (1 << 31) - 1

# Recovery reads a segment in chunks of this size (a batch larger than the
# chunk is read whole).
RECOVERY_READ_BYTES = 1 << 20

# Header scans (locating a batch after an index lookup) read this much at once.
HEADER_SCAN_READ_BYTES = 16 << 10

# A disk log keeps its most recent appends (at most this many bytes, in at most this many
# appends) in memory, so followers and consumers reading at the log end are answered without
# reading the file back. The bound is per partition: 10,000 written partitions hold at most
# 320 MiB this way, and a partition only holds what it was recently sent.
TAIL_CACHE_BYTES = 32 << 10
TAIL_CACHE_APPENDS = 64
