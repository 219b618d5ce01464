"""Progress of long ``fluxctl`` work, drawn by rich on stderr.

``progress(description, total)`` is a context manager yielding ``advance(n=1)``; with a total it
draws a bar with the count, the rate and the time left, without one a spinner with the count
and the time taken. It draws only where a person watches: stderr is a terminal and the command
was not asked for ``--json``; ``FLUX_PROGRESS=never`` silences it everywhere and
``FLUX_PROGRESS=always`` draws it even into a pipe (for tests). The bar goes away when the work
is done (what the command prints on stdout stays), so scripts reading stdout see no
difference.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator

__all__ = ["ENV", "progress", "progress_enabled"]

ENV = "FLUX_PROGRESS"


def progress_enabled(as_json: bool = False) -> bool:
    mode = os.environ.get(ENV, "auto").lower()
    if mode == "never" or (as_json and mode != "always"):
        return False
    if mode == "always":
        return True
    return sys.stderr.isatty()


@contextlib.contextmanager
def progress(
    description: str, total: int | None = None, *, as_json: bool = False
) -> Iterator[Callable[..., None]]:
    """Draw the progress of ``description`` while the block runs; yields ``advance(n=1)``
    (and ``advance(n, description=...)`` to change the text)."""
    if not progress_enabled(as_json):
        yield _nothing
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    forced = os.environ.get(ENV, "auto").lower() == "always"
    console = Console(stderr=True, force_terminal=True if forced else None)
    if total is None:
        columns = [SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.completed}"),
                   TimeElapsedColumn()]  # fmt: skip
    else:
        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TaskProgressColumn(), TimeRemainingColumn()]  # fmt: skip
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(description, total=total)

        def advance(n: int = 1, *, description: str | None = None) -> None:
            bar.update(task, advance=n, **({"description": description} if description else {}))

        yield advance


def _nothing(n: int = 1, *, description: str | None = None) -> None:
    return None
