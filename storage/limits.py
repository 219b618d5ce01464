"""Named upper bounds of ``flux.storage`` (TIGER_STYLE: limits on everything, in one place)."""

from __future__ import annotations

__all__ = [
    "MAX_SEGMENT_BYTES",
    "MAX_APPEND_BYTES",
    "MAX_BATCHES_PER_APPEND",
    "MAX_RELATIVE_OFFSET",
    "RECOVERY_READ_BYTES",
    "HEADER_SCAN_READ_BYTES",
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
