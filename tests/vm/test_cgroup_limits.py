"""Each cgroup v2 limit lands in its file and takes effect on a real process.
Needs cgroup v2 controllers: run by tests/vm/run-cgroup-tests (in the VM on
hybrid hosts)."""
import json
import os
import signal
import time

import pytest

from cghelpers import (  # noqa: F401 (fixtures)
    busybox,
    cgroup2_mount,
    cgroups,
    kcgroup,
    keyed,
    needs_controllers,
    needs_root,
    read,
    wait_for,
)

pytestmark = [pytest.mark.vm, needs_root, needs_controllers]


def stats(cgroups, abs_path):
    out = cgroups.run("stats", abs_path).stdout
    return dict((k, int(v)) for k, v in (line.split() for line in out.splitlines()))


def test_pids_max_stops_forks(cgroups, busybox):
    abs_path = cgroups.create("pids", {"pids": {"limit": 4}}).stdout.strip()
    assert read(abs_path + "/pids.max").strip() == "4"
    proc = cgroups.spawn(abs_path, busybox, "sh", "-c",
                         f"for i in 1 2 3 4 5 6 7 8; do {busybox} sleep 1000 & done; wait")
    wait_for(lambda: int(keyed(abs_path + "/pids.events")["max"]) > 0, "a refused fork in pids.events")
    assert int(read(abs_path + "/pids.current")) <= 4
    cgroups.run("kill", abs_path, "KILL")
    _, err = proc.communicate(timeout=60)
    assert "can't fork" in err or "Resource temporarily unavailable" in err, err


def test_memory_max_oom_kills_and_counts(cgroups, busybox):
    res = {"memory": {"limit": 32 << 20, "swap": 32 << 20, "reservation": 4 << 20}}
    abs_path = cgroups.create("oom", res).stdout.strip()
    assert read(abs_path + "/memory.max").strip() == str(32 << 20)
    if os.path.exists(abs_path + "/memory.swap.max"):
        assert read(abs_path + "/memory.swap.max").strip() == "0"  # OCI swap == limit: none
    assert read(abs_path + "/memory.low").strip() == str(4 << 20)
    assert cgroups.run("oom", abs_path).stdout.strip() == "0"
    # dd touches every page of its 64 MiB buffer.
    proc = cgroups.spawn(abs_path, busybox, "dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1")
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert int(keyed(abs_path + "/memory.events")["oom_kill"]) >= 1
    assert int(cgroups.run("oom", abs_path).stdout.strip()) >= 1
    st = stats(cgroups, abs_path)
    assert st["oom_kills"] >= 1 and st["memory_max"] == 32 << 20


def test_memory_swap_is_memory_plus_swap(cgroups):
    abs_path = cgroups.create("swap", {"memory": {"limit": 64 << 20, "swap": 192 << 20}}).stdout.strip()
    if not os.path.exists(abs_path + "/memory.swap.max"):
        pytest.skip("the kernel has no swap accounting (no memory.swap.max)")
    assert read(abs_path + "/memory.swap.max").strip() == str(128 << 20)


def test_cpu_max_throttles_and_weight(cgroups, busybox):
    res = {"cpu": {"shares": 512, "quota": 10000, "period": 100000}}
    abs_path = cgroups.create("cpu", res).stdout.strip()
    assert read(abs_path + "/cpu.max").strip() == "10000 100000"
    assert read(abs_path + "/cpu.weight").strip() == "59"
    cgroups.spawn(abs_path, busybox, "sh", "-c", "while :; do :; done")
    wait_for(lambda: int(keyed(abs_path + "/cpu.stat").get("nr_throttled", "0")) > 0,
             "cpu.stat nr_throttled > 0")


def test_cpuset_pins_process(cgroups, busybox):
    if os.cpu_count() < 2:
        pytest.skip("needs 2 CPUs")
    abs_path = cgroups.create("cpuset", {"cpu": {"cpus": "1", "mems": "0"}}).stdout.strip()
    assert read(abs_path + "/cpuset.cpus").strip() == "1"
    assert read(abs_path + "/cpuset.mems").strip() == "0"
    assert read(abs_path + "/cpuset.cpus.effective").strip() == "1"
    proc = cgroups.spawn(abs_path, busybox, "grep", "Cpus_allowed_list", "/proc/self/status")
    out, _ = proc.communicate(timeout=60)
    assert out.split() == ["Cpus_allowed_list:", "1"]


def block_device():
    """(major, minor, name) of a real disk of this machine, or None."""
    for name in sorted(os.listdir("/sys/block")):
        if name.startswith(("loop", "ram", "zram", "nbd")):
            continue
        major, minor = read(f"/sys/block/{name}/dev").strip().split(":")
        return int(major), int(minor), name
    return None


def test_io_weight_and_max(cgroups, busybox):
    dev = block_device()
    res = {"blockIO": {"weight": 500}}
    if dev:
        res["blockIO"]["throttleReadBpsDevice"] = [{"major": dev[0], "minor": dev[1], "rate": 524288}]
        # Devices are denied by default: allow reading this disk.
        res["devices"] = [{"allow": True, "type": "b", "major": dev[0], "minor": dev[1], "access": "r"}]
    abs_path = cgroups.create("io", res).stdout.strip()
    if os.path.exists(abs_path + "/io.bfq.weight"):
        assert read(abs_path + "/io.bfq.weight").split("\n")[0] == "default 500"
    else:
        assert read(abs_path + "/io.weight").split("\n")[0] == "default 4950"
    if not dev:
        return
    major, minor, name = dev
    assert f"{major}:{minor} rbps=524288 wbps=max riops=max wiops=max" in read(abs_path + "/io.max")
    # 2 MiB of uncached reads at 512 KiB/s take about 4 s: at least 2.5.
    start = time.monotonic()
    proc = cgroups.spawn(abs_path, busybox, "dd", f"if=/dev/{name}", "of=/dev/null", "bs=64k",
                         "count=32", "skip=20000", "iflag=direct")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert time.monotonic() - start >= 2.5
    rbytes = [line for line in read(abs_path + "/io.stat").splitlines() if line.startswith(f"{major}:{minor} ")]
    assert rbytes and "rbytes=" in rbytes[0]


def test_hugetlb_limit(cgroups):
    abs_path = cgroups.create("hugetlb", {"hugepageLimits": [{"pageSize": "2MB", "limit": 4194304}]}).stdout.strip()
    if not os.path.exists(abs_path + "/hugetlb.2MB.max"):
        pytest.skip("no 2MB huge pages on this machine")
    assert read(abs_path + "/hugetlb.2MB.max").strip() == "4194304"


def test_unified_and_update(cgroups, busybox, tmp_path):
    res = {"memory": {"limit": 128 << 20}, "unified": {"memory.high": str(96 << 20), "pids.max": "7"}}
    abs_path = cgroups.create("unified", res).stdout.strip()
    assert read(abs_path + "/memory.high").strip() == str(96 << 20)
    assert read(abs_path + "/pids.max").strip() == "7"

    upd = {"memory": {"limit": 64 << 20}, "pids": {"limit": 3}, "cpu": {"quota": 20000, "period": 100000, "idle": 1}}
    cgroups.run("update", abs_path, "-", input=json.dumps(upd))
    assert read(abs_path + "/memory.max").strip() == str(64 << 20)
    assert read(abs_path + "/pids.max").strip() == "3"
    assert read(abs_path + "/cpu.max").strip() == "20000 100000"
    assert read(abs_path + "/cpu.idle").strip() == "1"

    # checkBeforeUpdate refuses a limit below what is in use.
    proc = cgroups.spawn(abs_path, busybox, "sh", "-c",
                         "x=$(dd if=/dev/zero bs=4M count=1 2>/dev/null | tr '\\0' a); sleep 1000")
    wait_for(lambda: int(read(abs_path + "/memory.current")) > (1 << 20), "some memory in use")
    p = cgroups.run("update", abs_path, "-", check=False,
                    input=json.dumps({"memory": {"limit": 4096, "checkBeforeUpdate": True}}))
    assert p.returncode != 0 and "checkBeforeUpdate" in p.stderr
    assert read(abs_path + "/memory.max").strip() == str(64 << 20)
    proc.kill()


def test_kubelet_cgroupfs_layout(cgroups, busybox):
    # kubelet (cgroupfs driver) on v2: kubepods/burstable/pod<uid>/<container>.
    # The controllers are enabled all along the path, the limits land in the
    # leaf, and the stats see the process.
    name = "kubepods/burstable/pod0b7c6a5e-1c9d-4c43-9f0e-5a7b3e2f1d00/ctr1"
    res = {"memory": {"limit": 64 << 20}, "pids": {"limit": 16}, "cpu": {"shares": 512, "quota": 50000, "period": 100000}}
    abs_path = cgroups.create(name, res).stdout.strip()
    mount = cgroup2_mount()
    parent = mount + cgroups.parent
    for sub in ("", "/kubepods", "/kubepods/burstable", "/kubepods/burstable/pod0b7c6a5e-1c9d-4c43-9f0e-5a7b3e2f1d00"):
        enabled = set(read(parent + sub + "/cgroup.subtree_control").split())
        assert {"cpu", "memory", "pids"} <= enabled, (sub, enabled)
    assert read(abs_path + "/cgroup.subtree_control").strip() == ""
    assert read(abs_path + "/memory.max").strip() == str(64 << 20)
    assert read(abs_path + "/cpu.weight").strip() == "59"  # runc 1.3's curve, as above
    proc = cgroups.spawn(abs_path, busybox, "sleep", "1000")
    wait_for(lambda: stats(cgroups, abs_path).get("pids_current") == 1, "pids.current == 1")
    st = stats(cgroups, abs_path)
    assert st["memory_current"] > 0 and st["memory_working_set"] <= st["memory_current"]
    assert st["memory_max"] == 64 << 20
    proc.kill()
