"""runtime.hostview: which host folders a sandbox empties, binds back and shows through overlays
(issue 49). What a worker meets is tests/unit/runtime/test_sandbox.py's; these are the plans."""
import os

from pytest_ditar.runtime import hostview


def test_the_shield_goes_around_the_hosts_mounts_down_to_them(tmp_path, monkeypatch):
    """The kernel refuses an overlay over a folder holding a mount the sandbox's user namespace
    inherited locked: such a folder's subfolders get one each, down to the mount; a mount with none
    inside is shielded whole; /proc, /sys, /dev, links and the emptied folders never are."""
    plan = hostview.shield_plan(mounts=["/proc", "/sys", "/dev", "/dev/shm"])
    tops = {f"/{n}" for n in os.listdir("/") if os.path.isdir(f"/{n}") and not os.path.islink(f"/{n}")}
    hidden = [*hostview.masked(), *hostview.homes()]
    want = {t for t in tops - {"/proc", "/sys", "/dev"} if not hostview.under(t, hidden)}
    assert set(plan) == want, (plan, want)
    # a mount somewhere below /usr: /usr itself is not shielded, its other subfolders are
    usr = sorted(e.path for e in os.scandir("/usr") if e.is_dir(follow_symlinks=False))
    assert len(usr) >= 2, usr
    inner = sorted(e.path for e in os.scandir(usr[0]) if e.is_dir(follow_symlinks=False))
    mount = (inner[0] if inner else usr[0]) + "/a-mount"
    plan = hostview.shield_plan(mounts=[mount])
    assert "/usr" not in plan and set(usr[1:]) <= set(plan), plan
    assert not any(p == mount or mount.startswith(p + "/") for p in plan), plan  # nothing covers the mount


def test_the_shield_is_bounded():
    mounts = [f"{e.path}/m" for e in os.scandir("/usr") if e.is_dir(follow_symlinks=False)]
    mounts += [f"{e.path}/m" for d in ("/usr/lib", "/usr/share") if os.path.isdir(d)
               for e in os.scandir(d) if e.is_dir(follow_symlinks=False)]
    assert len(hostview.shield_plan(mounts=mounts)) <= hostview.SHIELD_MAX


def test_mount_points_read_the_kernels_escapes(tmp_path, monkeypatch):
    info = tmp_path / "mountinfo"
    info.write_text("27 1 254:0 / / rw - ext4 /dev/vda rw\n"
                    "28 27 0:25 / /mnt/with\\040space ro - tmpfs x ro\n")
    real_open = open

    def fake_open(path, *a, **kw):
        return real_open(info if path == "/proc/self/mountinfo" else path, *a, **kw)

    monkeypatch.setattr("builtins.open", fake_open)
    assert hostview.mount_points() == ["/", "/mnt/with space"]


def test_the_homes_are_hidden_and_never_the_root(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert str(tmp_path.resolve()) in hostview.homes()
    monkeypatch.setenv("HOME", "/")
    assert "/" not in hostview.homes()
    monkeypatch.setenv("HOME", "relative/path")
    assert not [h for h in hostview.homes() if not h.startswith("/")]
