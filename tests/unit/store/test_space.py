"""store.space: the room a gated run needs, and what counts as a full disk (the real disk in
tests/e2e/test_disk_full.py)."""
import errno

import pytest

from pytest_ditar.store import space


def test_a_disk_with_less_room_than_needed_is_named_with_its_free_space(tmp_path):
    assert space.shortage(tmp_path, need=1) is None
    said = space.shortage(tmp_path / "not" / "yet", need=1 << 60)  # the nearest existing folder is measured
    assert said.startswith("disk full: ") and f"free on the disk of {tmp_path}, a gated run needs" in said
    assert said.endswith("free space there and run again (nothing ran, nothing was recorded)")


def test_too_little_room_for_a_record_raises_enospc(tmp_path):
    space.ensure_room(tmp_path, need=1)
    with pytest.raises(OSError) as err:
        space.ensure_room(tmp_path, need=1 << 60)
    assert err.value.errno == errno.ENOSPC and space.is_full(err.value)
    assert "the record needs" in str(err.value)


@pytest.mark.parametrize("exc, full", [
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
    (RuntimeError("git mktree --batch failed: fatal: unable to write loose object file: No space left on device"),
     True),
    (RuntimeError("fatal: sha1 file '.git/index.lock' write error. Out of diskspace"), True),
    (OSError(errno.EACCES, "Permission denied"), False),
    (RuntimeError("unable to write loose object file: Permission denied"), False),
])
def test_what_counts_as_a_full_disk(exc, full):
    assert space.is_full(exc) is full


def test_the_refusal_names_where_and_says_the_state_is_whole():
    line = space.full_refusal(OSError(errno.ENOSPC, "No space\nleft on device"), "recording the run")
    assert line == ("disk full while recording the run: [Errno 28] No space left on device: the state is as the run "
                    "found it; free space on the project's disk and run the same command again")
