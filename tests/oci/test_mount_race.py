"""CVE-2021-30465: a read-only volume made writable by a sibling container.

Container A and container B share a volume. B's read-only volume is mounted
at a path that goes through the shared one (/shared/target). A swaps
`target` between a directory and a symlink to `/` in a tight loop
(mount_swap.c). A runtime that binds through a descriptor but resolves the
path again to remount it read-only binds the volume on the directory and
then remounts what the symlink gives, B's root: the root turns read-only and
the volume stays writable. kinglet sets every attribute on the mount it made,
through its descriptor: whichever way the path resolved, the volume is
read-only and nothing else changed.

Counts creations, not time: 300 of them, however slow the machine is.
"""
import os
import shutil
import subprocess
import uuid

import pytest

from ocihelpers import *  # noqa: F401,F403 (fixtures)
from musl import static_prog
from waiting import wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
CREATIONS = int(os.environ.get("KINGLET_MOUNT_RACE_CREATIONS", "300"))


@pytest.fixture(scope="module")
def swap_prog(tmp_path_factory):
    return static_prog(tmp_path_factory, os.path.join(HERE, "mount_swap.c"), "swapper")


def mounts_of(mountinfo):
    """[(root, mount point, options)] of a /proc/PID/mountinfo text."""
    out = []
    for line in mountinfo.splitlines():
        f = line.split()
        if len(f) > 5:
            out.append((f[3], f[4], f[5].split(",")))
    return out


def test_swapped_volume_path_never_leaves_a_writable_volume(
        kinglet, make_bundle, private_rootfs, tmp_path, swap_prog):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "target").mkdir()
    os.symlink("/", shared / "other")
    shutil.copy(swap_prog, shared / "mount_swap")
    rosrc = tmp_path / f"rosrc-{uuid.uuid4().hex[:8]}"
    rosrc.mkdir()
    (rosrc / "marker").write_text("read-only volume\n")

    def sibling(c):
        c["mounts"].append({"destination": "/shared", "type": "bind", "source": str(shared),
                            "options": ["rbind", "rw"]})
    a = "swap" + uuid.uuid4().hex[:8]
    kinglet("create", "--bundle",
            make_bundle(["/shared/mount_swap", "/shared", "target", "other"], edit=sibling), a,
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kinglet("start", a, check=True)
    def swapping():
        assert kinglet.state(a)["status"] == "running", "the swapper ended"
        return (shared / "swapping").exists()
    wait_for(swapping, timeout=300, what="the swapper to start")  # generous: a loaded machine

    def victim(c):
        c["root"]["readonly"] = False  # so that a remount landing on it shows
        c["mounts"] += [
            {"destination": "/shared", "type": "bind", "source": str(shared),
             "options": ["rbind", "rw"]},
            {"destination": "/shared/target", "type": "bind", "source": str(rosrc),
             "options": ["rbind", "ro"]},
        ]
    b = make_bundle(["cat", "/proc/self/mountinfo"], edit=victim, root=private_rootfs)
    writable_volume = root_changed = checked = on_root = 0
    failures = []
    try:
        for i in range(CREATIONS):
            cid = f"v{i}-" + uuid.uuid4().hex[:6]
            r = kinglet("run", "--bundle", b, cid, timeout=120)
            kinglet("delete", "--force", cid, timeout=60)
            if r.returncode != 0:
                failures.append(r.stderr.strip()[-200:])
                continue
            # Where the path resolved to the symlink when the volume was
            # bound, the volume sits on B's root (stacked on it: B's root
            # stays the rootfs): read-only all the same.
            ms = mounts_of(r.stdout)
            vol = [m for m in ms if m[0].endswith("/" + rosrc.name)]
            root = [m for m in ms if m[1] == "/" and m[0].endswith("/" + private_rootfs.name)]
            assert len(vol) == 1 and len(root) == 1, r.stdout
            checked += 1
            on_root += vol[0][1] == "/"
            if "rw" in vol[0][2]:
                writable_volume += 1
            if root[0][2][0] != "rw":
                root_changed += 1
            assert kinglet.state(a)["status"] == "running", "the swapper ended"
    finally:
        (shared / "stop").write_text("")
        kinglet("delete", "--force", a, timeout=60)
    # the race was run, both ways round
    assert checked >= CREATIONS // 2, (checked, failures[:3])
    assert 0 < on_root < checked, f"the path resolved the same way {checked} times: no race"
    assert (writable_volume, root_changed) == (0, 0), \
        f"{writable_volume} writable read-only volumes and {root_changed} roots remounted " \
        f"in {checked} containers"
    # Nothing leaked onto the host: the shared directory is as A left it.
    assert (rosrc / "marker").read_text() == "read-only volume\n"
    assert sorted(os.listdir(rosrc)) == ["marker"]
