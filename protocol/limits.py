"""Named upper bounds of the wire codec (STYLE.md: "limits on everything").

Every length read from the wire is checked against the bytes that remain in the frame before
anything is allocated, so a hostile length can never make the decoder allocate more than the
frame it was given. The bounds below are the second line of defence: they cap what a single
frame may describe even when it is large enough to hold it.
"""

from __future__ import annotations

__all__ = [
    "MAX_ARRAY_LENGTH",
    "MAX_STRING_LENGTH",
    "MAX_TAGGED_FIELDS",
]

#: Most elements one array of a message may hold (topics, partitions, replica ids, ...).
#: A metadata response for a very large cluster stays well below this.
MAX_ARRAY_LENGTH = 1 << 20

#: Longest string in bytes. Non-compact strings carry an int16 length, so Kafka itself can
#: never send more than this; compact strings are held to the same bound.
MAX_STRING_LENGTH = 0x7FFF

#: Most tagged fields one struct may carry in its tagged-field section.
MAX_TAGGED_FIELDS = 1 << 10
