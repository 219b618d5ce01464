"""Small real file systems for one node's data directory, and the faults they can be given.

- ``TmpfsDisk``: a size-limited tmpfs; ``fill()`` writes a ballast file until the kernel
  answers ENOSPC, ``free()`` deletes it.
- ``Ext4Disk``: ext4 on a loop device over a sparse image file. ``shut_down()`` is ext4's
  forced shutdown (``EXT4_IOC_SHUTDOWN``, xfstests' "godown"): from then on every write, fsync
  and read of the file system fails with EIO, as when a disk dies. ``error_read_only()`` is
  ext4's error path (``/sys/fs/ext4/<dev>/trigger_fs_error`` with ``errors=remount-ro``): the
  kernel turns the mount read-only under the running node and writes fail with EROFS, which is
  how a production disk goes read-only. (A plain ``mount -o remount,ro`` is refused with EBUSY
  while any file is open for writing, as a broker's segment files always are; device-mapper's
  ``error`` target would be the other way to EIO, but not every kernel has device-mapper.)
  ``remount()`` mounts the image again after the fault (the journal is replayed).

Every helper cleans up in ``close()`` (unmount, detach), even after a failed test; commands
run as root. ``missing_requirements()`` says why a machine cannot make these disks (a test
then skips). The disk-fault tests (tests/integration/test_disk_faults.py) use them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import struct
import subprocess
import time
from pathlib import Path

__all__ = ["Ext4Disk", "TmpfsDisk", "missing_requirements"]

#: ``_IOR('X', 125, __u32)``: ext4's (and xfs's) forced shutdown.
EXT4_IOC_SHUTDOWN = 0x8004587D
#: Flush the journal, not the data: what reached the disk stays consistent, the page cache of
#: file data not yet written back is lost (a disk that dies under a running broker).
EXT4_GOING_FLAGS_LOGFLUSH = 0x1
#: ``losetup -f`` can race another test for the same free device: retry this many times.
LOOP_ATTACH_ATTEMPTS = 20
BALLAST = "ballast"


def _run(*command: str) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}): {result.stderr}")
    return result.stdout


def _which(tool: str) -> str | None:
    return shutil.which(tool) or next(
        (str(path) for path in (Path("/usr/sbin") / tool, Path("/sbin") / tool) if path.exists()),
        None,
    )


def missing_requirements(*tools: str, loop: bool = False) -> str | None:
    """Why this machine cannot run a disk-fault test (None: it can)."""
    if os.geteuid() != 0:
        return "disk-fault tests mount file systems: they need root"
    for tool in ("mount", "umount", *tools):
        if _which(tool) is None:
            return f"{tool} is not installed"
    if loop and not Path("/dev/loop-control").exists():
        return "no loop devices (/dev/loop-control is missing)"
    return None


class TmpfsDisk:
    """A tmpfs of ``size_mib`` MiB mounted on ``mount_point``."""

    def __init__(self, mount_point: Path, size_mib: int) -> None:
        self.mount_point = mount_point
        mount_point.mkdir(parents=True, exist_ok=True)
        _run("mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0755", "tmpfs", str(mount_point))
        self._mounted = True

    def fill(self) -> int:
        """Write a ballast file until the file system is full; its size."""
        path = self.mount_point / BALLAST
        written = 0
        with open(path, "ab", buffering=0) as ballast:
            for chunk in (1 << 20, 4096, 1):
                block = b"\0" * chunk
                while True:
                    try:
                        written += ballast.write(block)
                    except OSError as error:
                        if error.errno != errno.ENOSPC:
                            raise
                        break
        return written

    def free(self) -> None:
        (self.mount_point / BALLAST).unlink(missing_ok=True)

    def close(self) -> None:
        if self._mounted:
            _unmount(self.mount_point)
            self._mounted = False


class Ext4Disk:
    """ext4 of ``size_mib`` MiB on a loop device over ``image``, mounted on ``mount_point``
    with ``errors=remount-ro``."""

    def __init__(self, image: Path, mount_point: Path, size_mib: int = 128) -> None:
        self.image = image
        self.mount_point = mount_point
        self.device: str | None = None
        self._mounted = False
        with open(image, "wb") as file:
            file.truncate(size_mib << 20)
        try:
            self.device = _attach_loop(image)
            _run("mkfs.ext4", "-q", "-F", "-m", "0", self.device)
            mount_point.mkdir(parents=True, exist_ok=True)
            self._mount()
        except BaseException:
            self.close()
            raise

    def _mount(self) -> None:
        assert self.device is not None
        _run("mount", "-t", "ext4", "-o", "errors=remount-ro", self.device, str(self.mount_point))
        self._mounted = True

    @property
    def sysfs(self) -> Path:
        assert self.device is not None
        return Path("/sys/fs/ext4") / Path(self.device).name

    def shut_down(self) -> None:
        """EXT4_IOC_SHUTDOWN: every later I/O of this file system fails with EIO."""
        fd = os.open(self.mount_point, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_LOGFLUSH))
        finally:
            os.close(fd)

    def can_error_read_only(self) -> bool:
        return (self.sysfs / "trigger_fs_error").exists()

    def error_read_only(self) -> None:
        """An ext4 error: with errors=remount-ro the kernel makes the mount read-only."""
        (self.sysfs / "trigger_fs_error").write_text("disk-fault test\n")

    def is_read_only(self) -> bool:
        """Whether creating a file fails with EROFS (newer kernels mark an ext4 error as an
        "emergency read-only" state that /proc/mounts does not show)."""
        probe = self.mount_point / ".read-only-probe"
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT, 0o644))
        except OSError as error:
            return error.errno == errno.EROFS
        probe.unlink()
        return False

    def remount(self) -> None:
        """After the fault (and once nothing has files open there): unmount, check the file
        system, mount it again."""
        assert self.device is not None
        if self._mounted:
            _unmount(self.mount_point)
            self._mounted = False
        # Exit codes 0-2 mean "clean" or "errors corrected".
        subprocess.run(["e2fsck", "-f", "-y", self.device], capture_output=True, timeout=120)
        self._mount()

    def close(self) -> None:
        if self._mounted:
            _unmount(self.mount_point)
            self._mounted = False
        if self.device is not None:
            with contextlib.suppress(RuntimeError):
                _run("losetup", "-d", self.device)
            _wait_detached(self.device)
            self.device = None
        self.image.unlink(missing_ok=True)


def _attach_loop(image: Path) -> str:
    problem = ""
    for _attempt in range(LOOP_ATTACH_ATTEMPTS):
        result = subprocess.run(
            ["losetup", "-f", "--show", str(image)], capture_output=True, text=True, timeout=30
        )
        if result.returncode == 0:
            return result.stdout.strip()
        problem = result.stderr
        if "busy" not in problem.lower() and "resource" not in problem.lower():
            break
    raise RuntimeError(f"losetup -f --show {image} failed: {problem}")


def _wait_detached(device: str, timeout_s: float = 30.0) -> None:
    """The kernel detaches a loop device once its last user let go (after a lazy unmount, a
    moment later): wait for that, so a test ends with nothing left attached."""
    backing = Path("/sys/block") / Path(device).name / "loop" / "backing_file"
    deadline = time.monotonic() + timeout_s
    while backing.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def _unmount(mount_point: Path) -> None:
    """Unmount, retrying briefly while a process that just exited still holds files there,
    and lazily (``-l``) as a last resort so a test never leaves a mount behind."""
    deadline = time.monotonic() + 10
    while True:
        result = subprocess.run(
            ["umount", str(mount_point)], capture_output=True, text=True, timeout=30
        )
        if result.returncode == 0 or "not mounted" in result.stderr:
            return
        if time.monotonic() > deadline:
            _run("umount", "-l", str(mount_point))
            return
        time.sleep(0.1)
