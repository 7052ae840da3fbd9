"""What of the host a worker's sandbox shows (runtime.sandbox builds bwrap's command line from it).

Three kinds of host folders (issue 49):
- emptied: the host's temporary folders, `/run` and the folders daemons keep their sockets in
  (masked), and the user's home (homes): an empty tmpfs of each sandbox's own, so nothing another
  process (the agent among them) leaves there, or when, reaches a role;
- bound back: what the worker reads that lies in an emptied folder (needed_reads: its interpreter,
  its model, the project);
- shielded: every other host folder it sees, shown through an overlay of its own where the kernel
  allows (shield_plan): a FIFO or socket file the agent made there is another inode inside, so no
  pipe of the agent's (or another role's) opens through it. A read-only mount stops neither.

Linux only; no pytest, git or torch here.
"""
from __future__ import annotations

import contextlib
import glob
import os
import re
import sys
from typing import Sequence

# The host's temporary folders: shared by every process on the host, so what appears there and
# when says what else runs (the judge's other runs among them). Every sandbox gets empty ones.
PRIVATE_TEMP = ("/tmp", "/var/tmp")


def homes() -> tuple[str, ...]:
    """The user's home folders: $HOME and the password database's (code reads either), real paths;
    never "/" (a home of "/" is the whole filesystem, not a private folder)."""
    found = {os.environ.get("HOME", "")}
    with contextlib.suppress(KeyError, ImportError, OSError):
        import pwd

        found.add(pwd.getpwuid(os.getuid()).pw_dir)
    return tuple(sorted({os.path.realpath(h) for h in found if h and os.path.isabs(h)} - {"/"}))


def hidden_roots() -> tuple[str, ...]:
    """What every sandbox shows as an empty folder of its own: the host's temporary folders and the
    user's home (what an agent or another process leaves there never reaches a role)."""
    temp = [os.path.realpath(r) for r in PRIVATE_TEMP if os.path.isdir(r) and not os.path.islink(r)]
    return outermost([*temp, *(h for h in homes() if os.path.isdir(h))])


def needed_reads(*extra: str) -> tuple[str, ...]:
    """What a worker reads that lies under a folder its sandbox empties (hidden_roots): its
    interpreter (prefixes, every folder on the judge's sys.path, this package's parent) and `extra`
    (its model, the project), real paths, outermost only; everything else it reads is visible already."""
    roots = hidden_roots()
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path,
             os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), *extra}
    paths = sorted({os.path.realpath(p) for p in found if p and os.path.exists(p)})
    return outermost([p for p in paths if any(p == r or p.startswith(r + os.sep) for r in roots)])


def outermost(paths: Sequence[str]) -> tuple[str, ...]:
    """`paths` less each one under another of them, parents first."""
    ps = sorted(set(paths))
    return tuple(p for p in ps if not any(p != q and p.startswith(q.rstrip(os.sep) + os.sep) for q in ps))


def masked() -> list[str]:
    """Folders hidden under an empty tmpfs: where the host keeps the Unix sockets of daemons that
    would run a command for the candidate outside its sandbox (systemd's and D-Bus's user bus,
    docker, tmux, screen, an ssh agent, X). A read-only mount does not stop connect(2) on a
    socket; the network namespace only stops abstract ones."""
    out = [d for d in ("/run", "/var/run", *PRIVATE_TEMP) if os.path.isdir(d) and not os.path.islink(d)]
    out += [d for d in glob.glob("/var/run/screen") if os.path.isdir(d) and not os.path.islink(d)]
    for var in ("SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS", "TMUX", "XDG_RUNTIME_DIR"):
        value = os.environ.get(var, "")
        path = value.split("unix:path=", 1)[1].split(",", 1)[0] if "unix:path=" in value else value.split(",", 1)[0]
        if path.startswith("/"):
            folder = path if os.path.isdir(path) else os.path.dirname(path)
            if folder not in ("", "/") and os.path.isdir(folder) and not os.path.islink(folder):
                out.append(folder)
    return sorted(set(out))


def mount_points() -> list[str]:
    """Every mount point of this process's mount namespace (/proc/self/mountinfo's fifth field)."""
    try:
        with open("/proc/self/mountinfo") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    unescape = re.compile(r"\\([0-7]{3})")
    return [unescape.sub(lambda m: chr(int(m.group(1), 8)), ln.split()[4]) for ln in lines if len(ln.split()) > 4]


def under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


SHIELD_MAX = 64  # overlays one sandbox mounts at most; a branch that needs more is shown as it is


def shield_plan(mounts: Sequence[str] | None = None) -> tuple[str, ...]:
    """The host folders a sandbox shows through an overlay of its own: the top-level folders (all
    but /proc, /sys, /dev, links, and those it empties anyway), and where one holds a mount of the
    host's, its subfolders instead, down to the mount (the kernel refuses an overlay that would
    cover a mount its user namespace inherited locked); what lies directly in a folder on the way
    to a mount stays the host's, as does a branch past SHIELD_MAX overlays.

    Why (issue 49): a read-only mount does not stop opening a FIFO (or connect(2) to a socket
    file) that the agent made wherever it can write; seen through an overlay, the same name is
    another inode, so its pipe is not the agent's nor another role's (the open finds no peer).
    `mounts`: the mount points to go around (this process's by default)."""
    hide = [*masked(), *homes()]
    mounts = [m for m in (mount_points() if mounts is None else mounts) if m != "/"]
    out: list[str] = []

    def cover(folder: str) -> None:
        if not any(m.startswith(folder + os.sep) for m in mounts):
            out.append(folder)
            return
        with contextlib.suppress(OSError):
            for entry in sorted(os.scandir(folder), key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False) and not under(entry.path, hide) and len(out) < SHIELD_MAX:
                    cover(entry.path)

    for name in sorted(os.listdir("/")):
        top = f"/{name}"
        if name not in ("proc", "sys", "dev") and os.path.isdir(top) and not os.path.islink(top) \
                and not under(top, hide) and len(out) < SHIELD_MAX:
            cover(top)
    return tuple(out)
