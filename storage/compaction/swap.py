"""The files of a clean: where cleaned segments are written, and how they replace the old ones.

A clean writes each cleaned segment (``.log`` with its ``.index`` and ``.timeindex``) into a
directory of its own in the partition's directory (``.cleaning-<random>/``, written here as
``.cleaning/``) and fsyncs it. The swap, on the log's owner thread:

1. rename ``.cleaning/<base>.log`` to ``<base>.log.swap`` and fsync the directory: from here
   on the cleaned segment is the truth (the commit point);
2. delete the segments it replaces (every segment with a base offset in
   ``[base, end of the swap file)``);
3. move the index files in and rename ``<base>.log.swap`` to ``<base>.log``; fsync.

``complete_swaps`` runs when a log is opened: ``.cleaning/`` is dropped (a clean that had not
committed: the old segments are all there) and a ``.swap`` file is finished (steps 2-3, the
index files rebuilt by recovery). So a crash at any step leaves the old segments or the new
one, never both or neither.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from flux.storage._segment import SEGMENT_FILE, fsync_directory
from flux.storage.compaction.batches import iter_file_batches

__all__ = ["CLEANING_DIRECTORY", "SWAP_SUFFIX", "complete_swaps"]

logger = logging.getLogger("flux.storage")

CLEANING_DIRECTORY = ".cleaning"
SWAP_SUFFIX = ".log.swap"


def swap_end(path: Path) -> int:
    """The offset after the last batch of a (complete, fsynced) swap file."""
    end = -1
    for header, _batch in iter_file_batches(path, path.stat().st_size):
        end = header.base_offset + header.last_offset_delta + 1
    return end


def complete_swaps(directory: Path) -> int:
    """Finish interrupted swaps in a partition directory; returns how many were finished."""
    for cleaning in directory.glob(CLEANING_DIRECTORY + "*"):
        logger.warning("%s: dropping an unfinished clean (%s)", directory, cleaning.name)
        shutil.rmtree(cleaning, ignore_errors=True)
    finished = 0
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return 0
    for name in names:
        if not name.endswith(SWAP_SUFFIX) or not name[:20].isdigit():
            continue
        swap = directory / name
        base = int(name[:20])
        end = swap_end(swap)
        if end < 0:
            logger.warning("%s: removing the empty swap file %s", directory, name)
            swap.unlink()
            continue
        for other in os.listdir(directory):
            match = SEGMENT_FILE.match(other)
            if match is not None and base <= int(match.group(1)) < end:
                (directory / other).unlink(missing_ok=True)
        os.replace(swap, directory / f"{base:020d}.log")
        fsync_directory(directory)
        logger.warning(
            "%s: finished an interrupted clean: segment %d replaces offsets [%d, %d)",
            directory,
            base,
            base,
            end,
        )
        finished += 1
    return finished
