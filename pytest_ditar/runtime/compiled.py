"""What a kept candidate compiled, added to the tag's compile cache (issue 29).

The candidate compiles into an overlay of the champion's cache whose writes land in a folder of
the judge's (runtime.sandbox's `kept`); the champion's side writes the cache itself. Once the
candidate is kept, its code is the champion's: its workers would write the same cache from the next
run on, so the judge adds what the candidate compiled and the next run's champion finds it warm
instead of compiling again. A discarded candidate's writes are dropped with its folder.

The judge only ever adds, up to the cache's bound (MAX_BYTES): a regular file whose name is free
in the cache, and only a file of the compiler's own making (issue 49; `compiler_output`): a path
of torch inductor's or triton's layout, and where the compiler names a file by the hash of its
content (inductor's Python modules, its FX-graph and AOT-autograd entries) that hash, recomputed
here. Anything else the candidate wrote into its overlay (a marker for its own later runs to read)
is left out, counted on the run's line. A file the champion's side wrote is never replaced, the overlay's whiteouts
(deletions) and links are skipped, and every folder is opened without following links, one
component at a time (O_NOFOLLOW, relative to its parent's descriptor), so a link planted in the
cache cannot send the judge's write elsewhere.
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


# The cache's bound: a KEEP adds only what fits beneath it, so an overnight loop of kept candidates
# (or one that writes junk beside its kernels) cannot fill the disk. DiT-XL/2's compiled block and
# decoder took 41 MB on the H200 (session 18), autotuned variants a few times that.
MAX_BYTES = 2 * 2**30


# Inductor's and triton's cache layout (torch 2.x): `<d>/<p><d><49>.<ext>` (a module, its C++ and
# shared object, kernels; <d> = the name's 2nd and 3rd characters), FX-graph and AOT-autograd entries
# named by their content's hash, triton's per-kernel folders. Lock files are never needed again.
_B32 = "[a-z2-7]"
_CODE = re.compile(rf"^(?P<d>{_B32}{{2}})/(?P<stem>[a-z](?P=d){_B32}{{49}})\.(?P<ext>py|pyi|cpp|h|hpp|so|o|"
                   rf"so\.load_ok|main\.cpp|main\.so|kernel\.cpp|kernel\.so|json|cubin|hsaco|ptx|spv|best_config)$")
_GRAPH = re.compile(rf"^fxgraph/(?P<d>{_B32}{{2}})/f(?P=d){_B32}{{49}}/(?P<sum>{_B32}{{51}})$")
_AOT = re.compile(rf"^aotautograd/a{_B32}{{51}}/(?P<sum>{_B32}{{51}})$")
_LOCK = re.compile(rf"^locks/[a-z]{_B32}{{51}}\.lock$")  # the compiler's, never needed by a later run: not counted
_TRITON = re.compile(r"^triton/[A-Za-z0-9_-]{16,64}/[A-Za-z0-9_.-]{1,200}\."
                     r"(?:json|ttir|ttgir|llir|ptx|cubin|hsaco|amdgcn|source|spv|so)$")


def content_hash(data: bytes) -> str:
    """Inductor's content hash (torch._inductor.codecache.sha256_hash)."""
    return base64.b32encode(hashlib.sha256(data).digest())[:51].decode().lower()


def compiler_output(rel: str, path: "Path | str") -> bool:
    """Whether the file at `path`, at `rel` (relative to the cache, '/'-separated), is of the
    compiler's making: its layout, and its content's hash where the compiler names it by that."""
    if (m := _GRAPH.match(rel) or _AOT.match(rel)) is not None:
        return content_hash(Path(path).read_bytes()) == m.group("sum")
    if (m := _CODE.match(rel)) is not None:
        if m.group("ext") == "py":  # inductor's module: "c" + the hash of its stripped source
            return content_hash(Path(path).read_bytes().strip()) == m.group("stem")[1:]
        return True
    return _TRITON.match(rel) is not None


@dataclass(frozen=True)
class Promoted:
    """What one hand-over added to the cache, and what it left out for want of room."""
    files: int = 0
    bytes: int = 0
    left_files: int = 0
    left_bytes: int = 0
    foreign_files: int = 0  # files that are no compiler output: never added

    def __add__(self, other: "Promoted") -> "Promoted":
        return Promoted(self.files + other.files, self.bytes + other.bytes,
                        self.left_files + other.left_files, self.left_bytes + other.left_bytes,
                        self.foreign_files + other.foreign_files)

    def note(self, cache: Path) -> str | None:
        """The run's line about it; None where nothing was added or left out."""
        if not self.files and not self.left_files and not self.foreign_files:
            return None
        line = (f"ditar: compile cache: {self.files} files ({self.bytes / 1e6:.1f} MB) the kept candidate compiled "
                f"added to {cache}")
        if self.left_files:
            line += (f"; {self.left_files} files ({self.left_bytes / 1e6:.1f} MB) left out: the cache is bounded at "
                     f"{MAX_BYTES / 2**30:.1f} GiB (delete the folder to start it over: it is only a cache)")
        if self.foreign_files:
            line += f"; {self.foreign_files} files that are no compiler output not added"
        return line


def size_of(cache: Path) -> int:
    """The bytes of the regular files under `cache` (links not followed); 0 where it is absent."""
    total = 0
    for dirpath, _dirs, files in os.walk(cache):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
    return total


def promote(upper: Path, cache: Path, room: int = MAX_BYTES) -> Promoted:
    """Copy the regular files under `upper` (an overlay's upper folder) whose names are free in
    `cache`, while their bytes fit in `room`. A name already taken, a whiteout or a link is skipped;
    a file that does not fit is left out (counted), a smaller one after it may still go in."""
    out = Promoted()
    if not upper.is_dir():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    root = os.open(cache, _DIR_FLAGS)
    try:
        for dirpath, _dirs, files in os.walk(upper):  # followlinks=False: a linked folder is not entered
            parts = Path(dirpath).relative_to(upper).parts
            regular = [(n, st) for n in files
                       if stat.S_ISREG((st := os.lstat(os.path.join(dirpath, n))).st_mode)]
            made = [(n, st) for n, st in regular if _made_by_compiler("/".join((*parts, n)), os.path.join(dirpath, n))]
            locks = sum(1 for n, _ in regular if _LOCK.match("/".join((*parts, n))))
            out += Promoted(foreign_files=len(regular) - len(made) - locks)
            regular = made
            if not regular:
                continue
            fd = _open_folder(root, parts)
            if fd is None:
                continue
            try:
                for name, st in regular:
                    if out.bytes + st.st_size > room:
                        if not _taken(fd, name):
                            out += Promoted(left_files=1, left_bytes=st.st_size)
                    elif _add(fd, name, os.path.join(dirpath, name)):
                        out += Promoted(1, st.st_size)
            finally:
                os.close(fd)
    finally:
        os.close(root)
    return out


def _made_by_compiler(rel: str, path: str) -> bool:
    try:
        return compiler_output(rel, path)
    except OSError:
        return False


def _open_folder(root: int, parts: tuple[str, ...]) -> int | None:
    """A descriptor of root/parts, made where missing; None where a component is not a plain folder."""
    fd = os.dup(root)
    for part in parts:
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, 0o755, dir_fd=fd)
        try:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError:  # a link or a file under that name: nothing goes below it
            os.close(fd)
            return None
        os.close(fd)
        fd = nxt
    return fd


def _taken(folder: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _add(folder: int, name: str, src: str) -> bool:
    """Write src as `name` in the open folder unless the name is taken: a temporary name first, then
    a link(2) that fails where the name exists (never a replace)."""
    tmp = f".{name}.ditar-{os.getpid()}"
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=folder)
    except OSError:
        return False
    try:
        with os.fdopen(out, "wb") as dst, open(src, "rb") as fh:
            shutil.copyfileobj(fh, dst)
            dst.flush()
            os.fsync(dst.fileno())
        try:
            os.link(tmp, name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
            return True
        except FileExistsError:
            return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder)


def remove(kept: "Path | str") -> None:
    """Delete a kept-writes folder; the overlay leaves its `work/work` without permissions."""
    for dirpath, dirs, _files in os.walk(kept):  # top-down: each folder opened up before it is entered
        for d in dirs:
            path = os.path.join(dirpath, d)
            if not os.path.islink(path):
                with contextlib.suppress(OSError):
                    os.chmod(path, 0o700)
    shutil.rmtree(kept, ignore_errors=True)
