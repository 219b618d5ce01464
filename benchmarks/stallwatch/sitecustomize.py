"""Event-loop stall watcher for node processes started by a benchmark (a profiling aid, not
part of Flux).

Put this directory first on ``PYTHONPATH`` and set ``FLUX_STALLWATCH`` to a directory; every
Python process that runs ``uvloop.run`` (each node) then writes ``stall-<pid>.log`` there: a
line per stall of its event loop longer than ``FLUX_STALLWATCH_MS`` (default 25), with the
stacks the loop thread was in during the stall, most frequent first. For example

    FLUX_STALLWATCH=/tmp/stalls PYTHONPATH=benchmarks/stallwatch \\
        .venv/bin/python benchmarks/replicated_produce.py --partitions 10000

A heartbeat task on the loop stamps the time every 5 ms; a thread samples the loop thread's
stack every 3 ms while the stamp is older than the threshold.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
import traceback

_OUT_DIR = os.environ.get("FLUX_STALLWATCH")


def _install(out_dir: str) -> None:
    import asyncio

    threshold_s = float(os.environ.get("FLUX_STALLWATCH_MS", "25")) / 1000
    state: dict[str, float | None] = {"beat": None}
    loop_thread: list[int] = []

    def watch() -> None:
        path = os.path.join(out_dir, f"stall-{os.getpid()}.log")
        with open(path, "a", buffering=1) as out:
            samples: collections.Counter[str] = collections.Counter()
            started: float | None = None
            while True:
                time.sleep(0.003)
                beat = state["beat"]
                if beat is None or not loop_thread:
                    continue
                if time.monotonic() - beat > threshold_s:
                    if started is None:
                        started = beat
                        samples.clear()
                    frame = sys._current_frames().get(loop_thread[0])
                    if frame is not None:
                        stack = traceback.extract_stack(frame)[-12:]
                        samples[
                            " <- ".join(
                                f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}"
                                for f in reversed(stack)
                            )
                        ] += 1
                elif started is not None:
                    out.write(
                        f"STALL {time.time():.3f} {(time.monotonic() - started) * 1000:.1f}ms\n"
                    )
                    for stack, count in samples.most_common(4):
                        out.write(f"   {count} {stack}\n")
                    started = None

    async def beat_forever() -> None:
        loop_thread.append(threading.get_ident())
        while True:
            state["beat"] = time.monotonic()
            await asyncio.sleep(0.005)

    def wrap(coro):  # type: ignore[no-untyped-def]
        async def runner():  # type: ignore[no-untyped-def]
            task = asyncio.ensure_future(beat_forever())
            try:
                return await coro
            finally:
                task.cancel()

        return runner()

    try:
        import uvloop
    except ImportError:
        return
    original = uvloop.run

    def run(coro, *args, **kwargs):  # type: ignore[no-untyped-def]
        return original(wrap(coro), *args, **kwargs)

    uvloop.run = run
    threading.Thread(target=watch, name="flux-stallwatch", daemon=True).start()


if _OUT_DIR:
    _install(_OUT_DIR)
