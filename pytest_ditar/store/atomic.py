"""Crash-safe writes and the inter-process lock: the one implementation every writer uses.

A file is written to a temp file in the target's directory (`.<name>.<random>.tmp`, so readers
that glob for real files never see it), flushed and fsynced, `os.replace`d over the target, and
the directory is fsynced so the rename itself survives a power cut. A kill -9 at any point leaves
the old file or the new one, never a torn one. Directories (snapshots, model caches) are built
beside their target and renamed into place the same way.

No pytest, git or torch here.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = [
    "LockTimeout",
    "TMP_SUFFIX",
    "atomic_file",
    "file_lock",
    "fsync_dir",
    "publish_dir",
    "remove_stale_temps",
    "temp_dir_beside",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_text_atomic",
]

TMP_SUFFIX = ".tmp"


class LockTimeout(TimeoutError):
    """Another process held a file lock for longer than the timeout."""


def fsync_dir(directory: Path | str) -> None:
    """Persist renames and creations inside `directory`."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: Path | str, mode: str = "wb", **open_kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temp file beside `path`; on a clean exit it replaces `path`, on an error it is removed.

    For writers that need a file object (np.savez, np.save); plain data goes through write_*_atomic.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # as open() would make it: mkstemp's 0600 is for the temp name only
        with os.fdopen(fd, mode, **open_kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def _umask() -> int:
    """The process's umask, read where Linux shows it (no set-and-restore race), else set and restored."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def write_bytes_atomic(path: Path | str, data: bytes) -> None:
    with atomic_file(path, "wb") as fh:
        fh.write(data)


def write_text_atomic(path: Path | str, text: str, encoding: str = "utf-8") -> None:
    # newline="": the text is written as given, so a hash of it matches the file's bytes.
    with atomic_file(path, "w", encoding=encoding, newline="") as fh:
        fh.write(text)


def write_json_atomic(path: Path | str, data: Any, **dumps_kwargs: Any) -> None:
    """json.dumps(data, indent=1, **dumps_kwargs), written atomically."""
    dumps_kwargs.setdefault("indent", 1)
    write_text_atomic(path, json.dumps(data, **dumps_kwargs))


def remove_stale_temps(path: Path | str) -> None:
    """Remove temp files a killed writer of `path` left behind (call it under the writers' lock)."""
    path = Path(path)
    for stale in path.parent.glob(f".{path.name}.*{TMP_SUFFIX}"):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()


def temp_dir_beside(target: Path | str) -> Path:
    """An empty hidden directory next to `target`, to build it in before publish_dir."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))


def _fsync_tree(root: Path) -> None:
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(dirpath)


def publish_dir(tmp: Path | str, target: Path | str, *, replace: bool = False) -> bool:
    """Move the finished directory `tmp` to `target` in one rename, its contents fsynced first.

    replace=False: when `target` already exists (a concurrent builder won), `tmp` is dropped and
    False is returned; the caller decides whether theirs will do. replace=True: an existing
    `target` is swapped out (renamed aside, then deleted), so readers see the old or the new one.
    """
    tmp, target = Path(tmp), Path(target)
    try:
        _fsync_tree(tmp)
        if replace and target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            try:
                os.replace(tmp, target)
            except OSError:
                if not target.is_dir():
                    raise
                return False
        fsync_dir(target.parent)
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def file_lock(path: Path | str, timeout_s: float, *, error: type[Exception] = LockTimeout,
              holder: str = "another process holds it") -> Iterator[None]:
    """Exclusive flock of `path` (created if missing), polled until `timeout_s`, then `error`.

    flock, not a lock file's existence: the kernel releases it when a holder dies, so a kill -9
    never leaves the lock stuck. The file is opened without following a symlink and must be a
    regular file: a link planted where the lock lives would have it create or truncate nothing, but
    lock (and, with O_CREAT, create) a file of the link's choosing, anywhere the user can write
    (filelock's symlink advisories, the same pattern); `error` names the path instead.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise error(f"lock file {path} is a symbolic link; a lock must be a regular file: remove the link") \
                from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise error(f"lock file {path} is not a regular file; remove it")
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                if time.monotonic() >= deadline:
                    raise error(f"could not lock {path} within {timeout_s:g}s: {holder}") from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def sha256_file(path: Path) -> str:
    """A file's SHA-256, read in 1 MiB chunks (this module imports nothing heavy: loop.integrity.stamps runs
    it at every pytest start in a ditar project)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
