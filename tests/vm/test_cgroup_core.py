"""cgroup v2 features that need no controller: grouping, cgroup.freeze,
cgroup.kill, listing, removal, cgroupsPath handling, and device access
control through the eBPF program. They run wherever cgroup2 is mounted: on
this hybrid host (cgroup2 at /sys/fs/cgroup/unified, no controllers) and in
the VM."""
import os
import signal

import pytest

from cghelpers import (  # noqa: F401 (fixtures)
    busybox,
    cgroup2_mount,
    cgroups,
    kcgroup,
    keyed,
    needs_root,
    read,
    wait_for,
)

pytestmark = needs_root


def proc_cgroup(pid):
    for line in read(f"/proc/{pid}/cgroup").splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def test_create_enter_list_destroy(cgroups, busybox):
    p = cgroups.create("group")
    abs_path = p.stdout.strip()
    mount = cgroup2_mount()
    assert abs_path == f"{mount}{cgroups.parent}/group"
    assert os.path.isdir(abs_path)

    proc = cgroups.spawn(abs_path, busybox, "sleep", "1000")
    wait_for(lambda: proc_cgroup(proc.pid) == f"{cgroups.parent}/group", "the process in the cgroup")
    # A child of the process, and one in a nested cgroup, are listed too.
    os.mkdir(abs_path + "/inner")
    inner = cgroups.spawn(abs_path + "/inner", busybox, "sleep", "1000")
    wait_for(lambda: proc_cgroup(inner.pid) == f"{cgroups.parent}/group/inner", "nested process")
    pids = cgroups.run("pids", abs_path).stdout.split()
    assert sorted(pids) == sorted([str(proc.pid), str(inner.pid)])

    # An existing cgroup with processes is not reused by another container.
    again = cgroups.create("group", check=False)
    assert again.returncode != 0
    assert "already has processes" in again.stderr

    # Destroy refuses while populated (it waits, then times out): kill first.
    cgroups.run("kill", abs_path, "KILL")
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert inner.wait(timeout=60) == -signal.SIGKILL
    cgroups.run("destroy", abs_path)
    assert not os.path.exists(abs_path)


def test_reuse_empty_cgroup(cgroups):
    first = cgroups.create("reuse").stdout.strip()
    second = cgroups.create("reuse").stdout.strip()
    assert first == second


def test_freeze_thaw(cgroups, busybox, tmp_path):
    abs_path = cgroups.create("freeze").stdout.strip()
    counter = tmp_path / "count"
    proc = cgroups.spawn(abs_path, busybox, "sh", "-c",
                         f'i=0; while :; do i=$((i+1)); echo $i > {counter}; done')
    wait_for(lambda: counter.exists() and read(counter).strip(), "the counter to start")

    cgroups.run("freeze", abs_path)
    # kcgroup returns once the kernel reports the cgroup frozen.
    assert keyed(abs_path + "/cgroup.events")["frozen"] == "1"
    assert read(abs_path + "/cgroup.freeze").strip() == "1"
    # A frozen task sleeps in the freezer trap (inlined into get_signal on
    # newer kernels), although it was a busy loop.
    assert read(f"/proc/{proc.pid}/wchan") in ("do_freezer_trap", "get_signal")
    assert "\nState:\tS" in read(f"/proc/{proc.pid}/status")
    before = read(counter)
    assert read(counter) == before

    cgroups.run("thaw", abs_path)
    assert keyed(abs_path + "/cgroup.events")["frozen"] == "0"
    wait_for(lambda: read(counter) not in ("", before), "the counter to move again")
    assert proc.poll() is None


def test_kill_all_with_cgroup_kill(cgroups, busybox):
    abs_path = cgroups.create("kill").stdout.strip()
    # The shell forks children: all of them die with SIGKILL.
    proc = cgroups.spawn(abs_path, busybox, "sh", "-c", f"{busybox} sleep 1000 & {busybox} sleep 1000 & wait")
    wait_for(lambda: len(cgroups.run("pids", abs_path).stdout.split()) == 3, "three processes")
    cgroups.run("kill", abs_path, "KILL")
    assert proc.wait(timeout=60) == -signal.SIGKILL
    wait_for(lambda: keyed(abs_path + "/cgroup.events")["populated"] == "0", "an empty cgroup")


def test_kill_with_other_signal(cgroups, busybox):
    abs_path = cgroups.create("term").stdout.strip()
    procs = [cgroups.spawn(abs_path, busybox, "sleep", "1000") for _ in range(2)]
    wait_for(lambda: len(cgroups.run("pids", abs_path).stdout.split()) == 2, "two processes")
    cgroups.run("kill", abs_path, "TERM")
    for p in procs:
        assert p.wait(timeout=60) == -signal.SIGTERM
    # The cgroup was thawed again after signalling.
    assert read(abs_path + "/cgroup.freeze").strip() == "0"


def test_open_missing_fails(cgroups):
    abs_path = cgroups.create("gone").stdout.strip()
    os.rmdir(abs_path)
    p = cgroups.run("destroy", abs_path, check=False)
    # Opening a missing cgroup fails clearly; destroying one that vanished
    # after opening is success (idempotent delete).
    assert p.returncode != 0 and "gone" in p.stderr


@pytest.mark.parametrize("path,message", [
    ("system.slice:kinglet:c1", "systemd"),
    ("/a/../../etc", "invalid"),
])
def test_bad_cgroups_path(cgroups, path, message):
    p = cgroups.run("create", path, "c1", "", check=False)
    assert p.returncode != 0
    assert message in p.stderr
    assert "cgroupsPath" in p.stderr


def test_open_outside_cgroupfs_refused(cgroups, tmp_path):
    p = cgroups.run("pids", str(tmp_path), check=False)
    assert p.returncode != 0
    assert "not below the cgroup2 mount" in p.stderr


def test_symlink_not_followed(cgroups, tmp_path):
    # cgroupfs cannot hold symlinks, but a path given to open may try to go
    # through one: the walk uses O_NOFOLLOW from the mount's fd.
    abs_path = cgroups.create("nofollow").stdout.strip()
    p = cgroups.run("pids", abs_path + "/../../../../etc", check=False)
    assert p.returncode != 0
    assert "invalid path" in p.stderr


def test_unified_key_with_path_refused(cgroups):
    p = cgroups.create("unified-bad", {"unified": {"../cgroup.procs": "1"}}, check=False)
    assert p.returncode != 0
    assert "linux.resources.unified" in p.stderr


# ---- devices ----------------------------------------------------------------


def can_open(busybox, cgroups, abs_path, node, mode):
    redirect = "<" if mode == "r" else ">"
    proc = cgroups.spawn(abs_path, busybox, "sh", "-c", f": {redirect} {node}")
    out, err = proc.communicate(timeout=60)
    return proc.returncode == 0, err


def test_devices_ebpf(cgroups, busybox, tmp_path):
    # Nodes of our own, so that the test does not depend on /dev.
    null = tmp_path / "null"
    kmsg = tmp_path / "kmsg"
    os.mknod(null, 0o666 | 0o020000, os.makedev(1, 3))
    os.mknod(kmsg, 0o644 | 0o020000, os.makedev(1, 11))

    res = {"devices": [{"allow": False, "access": "rwm"}]}
    abs_path = cgroups.create("devices", res).stdout.strip()
    ok, err = can_open(busybox, cgroups, abs_path, null, "w")
    assert ok, err
    ok, err = can_open(busybox, cgroups, abs_path, kmsg, "r")
    assert not ok and "Operation not permitted" in err

    # Outside the cgroup the same node opens: the program is the cause.
    with open(kmsg, "rb", buffering=0):
        pass

    # update replaces the program: read allowed now, write still denied.
    import json
    upd = tmp_path / "upd.json"
    upd.write_text(json.dumps({"devices": [
        {"allow": False, "access": "rwm"},
        {"allow": True, "type": "c", "major": 1, "minor": 11, "access": "r"}]}))
    cgroups.run("update", abs_path, str(upd))
    ok, err = can_open(busybox, cgroups, abs_path, kmsg, "r")
    assert ok, err
    ok, err = can_open(busybox, cgroups, abs_path, kmsg, "w")
    assert not ok and "Operation not permitted" in err
    # Exactly one device program is attached after the replacement.
    bpftool = "/usr/sbin/bpftool"
    if os.access(bpftool, os.X_OK):
        import subprocess
        out = subprocess.run([bpftool, "cgroup", "show", abs_path], capture_output=True, text=True).stdout
        assert out.count("cgroup_device") == 1, out


def test_devices_mknod(cgroups, busybox, tmp_path):
    abs_path = cgroups.create("mknod", {"devices": [{"allow": False, "access": "rwm"}]}).stdout.strip()
    # mknod of any device is allowed (runc's default), opening it is not.
    proc = cgroups.spawn(abs_path, busybox, "sh", "-c",
                         f"{busybox} mknod {tmp_path}/sda b 8 0 && echo made && : < {tmp_path}/sda",
                         cwd=str(tmp_path))
    out, err = proc.communicate(timeout=60)
    assert "made" in out
    assert proc.returncode != 0 and "Operation not permitted" in err


def test_kill_paused_stays_paused(cgroups, busybox):
    abs_path = cgroups.create("paused").stdout.strip()
    # A handled signal waits for the thaw (a fatal one would kill at once).
    proc = cgroups.spawn(abs_path, busybox, "sh", "-c", f'trap "exit 3" TERM; {busybox} sleep 1000 & wait')
    wait_for(lambda: len(cgroups.run("pids", abs_path).stdout.split()) == 2, "two processes")
    cgroups.run("freeze", abs_path)
    cgroups.run("kill", abs_path, "TERM")
    # A kill does not resume a paused container: the signal wakes its
    # tasks only to freeze them again in its delivery (cgroup.events says 0
    # meanwhile, for as long as a busy machine takes to run them there).
    assert read(abs_path + "/cgroup.freeze").strip() == "1"
    wait_for(lambda: keyed(abs_path + "/cgroup.events")["frozen"] == "1", "frozen again")
    assert proc.poll() is None
    cgroups.run("thaw", abs_path)
    assert proc.wait(timeout=60) == 3


def test_failed_create_leaves_nothing(cgroups):
    p = cgroups.create("badvalue", {"unified": {"cgroup.max.depth": "many"}}, check=False)
    assert p.returncode != 0
    assert "write `many` to cgroup.max.depth" in p.stderr, p.stderr
    assert not os.path.exists(cgroups.path("badvalue"))
    # A cgroup that existed before is left in place.
    cgroups.create("badvalue")
    p = cgroups.create("badvalue", {"unified": {"cgroup.max.depth": "many"}}, check=False)
    assert p.returncode != 0
    assert os.path.isdir(cgroups.path("badvalue"))


def test_clone_into_cgroup_with_fd(cgroups, busybox, kcgroup):
    # oci_cgroup_fd() is what the executor hands to clone3(CLONE_INTO_CGROUP).
    abs_path = cgroups.create("clone3").stdout.strip()
    p = cgroups.run("spawn", abs_path, "--", busybox, "cat", "/proc/self/cgroup")
    assert f"0::{cgroups.parent}/clone3" in p.stdout.splitlines()
