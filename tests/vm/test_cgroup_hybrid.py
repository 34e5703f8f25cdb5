"""On a hybrid host (cgroup v1 controllers; cgroup2 mounted without them, as
on these machines at /sys/fs/cgroup/unified) a container cgroup is still
created, used for grouping, freezing and killing, every requested limit whose
controller is missing is skipped with exactly one warning per controller, and
creation succeeds."""
import os
import signal

import pytest

from cghelpers import (  # noqa: F401 (fixtures)
    busybox,
    cgroup2_mount,
    cgroups,
    has_v2_controllers,
    kcgroup,
    keyed,
    needs_root,
    read,
    wait_for,
)

pytestmark = [needs_root, pytest.mark.skipif(
    has_v2_controllers(),
    reason="this host has cgroup v2 controllers: the hybrid fallback is not reachable here",
)]

RESOURCES = {
    "cpu": {"shares": 1024, "quota": 50000, "period": 100000, "cpus": "0", "mems": "0"},
    "memory": {"limit": 67108864, "swap": 67108864, "reservation": 1048576},
    "pids": {"limit": 10},
    "blockIO": {"weight": 500,
                "throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 1048576}]},
    "hugepageLimits": [{"pageSize": "2MB", "limit": 0}],
    "unified": {"memory.high": "50000000", "pids.max": "20"},
    "devices": [{"allow": False, "access": "rwm"}],
}
REQUESTED = {"cpu", "cpuset", "memory", "pids", "io", "hugetlb"}


def test_hybrid_create_warns_once_per_missing_controller(cgroups, busybox):
    p = cgroups.create("hybrid", RESOURCES)
    assert p.returncode == 0, p.stderr
    abs_path = p.stdout.strip()
    assert abs_path.startswith(cgroup2_mount() + "/")
    available = set(read(abs_path + "/cgroup.controllers").split())
    missing = REQUESTED - available
    assert missing, "expected a host without (most) cgroup v2 controllers"

    warnings = [line for line in p.stderr.splitlines() if " warning " in line]
    for c in sorted(missing):
        hits = [w for w in warnings if f"the {c} controller is not available" in w]
        assert len(hits) == 1, f"{c}: {hits}"
    assert len(warnings) == len(missing), warnings
    # Limits whose controller is there are applied (hugetlb is free of v1
    # on this host).
    if "hugetlb" in available and os.path.exists(abs_path + "/hugetlb.2MB.max"):
        assert read(abs_path + "/hugetlb.2MB.max").strip() == "0"

    # Grouping, freeze and kill work without any controller.
    proc = cgroups.spawn(abs_path, busybox, "sleep", "1000")
    wait_for(lambda: cgroups.run("pids", abs_path).stdout.split() == [str(proc.pid)], "the process listed")
    cgroups.run("freeze", abs_path)
    assert keyed(abs_path + "/cgroup.events")["frozen"] == "1"
    cgroups.run("thaw", abs_path)
    cgroups.run("kill", abs_path, "KILL")
    assert proc.wait(timeout=60) == -signal.SIGKILL
    cgroups.run("destroy", abs_path)
    assert not os.path.exists(abs_path)


def test_hybrid_update_warns_and_succeeds(cgroups):
    abs_path = cgroups.create("hybrid-upd").stdout.strip()
    import json
    p = cgroups.run("update", abs_path, "-", input=json.dumps({"pids": {"limit": 5}, "memory": {"limit": 1 << 26}}))
    warnings = [line for line in p.stderr.splitlines() if " warning " in line]
    assert len(warnings) == 2, warnings
    assert any("the pids controller" in w for w in warnings)
    assert any("the memory controller" in w for w in warnings)


def stats(cgroups, abs_path):
    out = cgroups.run("stats", abs_path).stdout
    return dict((k, int(v)) for k, v in (line.split() for line in out.splitlines()))


def test_hybrid_cpu_accounting(cgroups, busybox):
    # cpu.stat is kept by cgroup2 itself: CPU usage is known without the
    # cpu controller; memory and pids figures are absent, not zero.
    abs_path = cgroups.create("hybrid-cpu").stdout.strip()
    assert stats(cgroups, abs_path)["cpu_usage_usec"] == 0
    proc = cgroups.spawn(abs_path, busybox, "sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
    proc.communicate(timeout=120)
    st = stats(cgroups, abs_path)
    assert st["cpu_usage_usec"] > 10000, st
    assert st["cpu_user_usec"] > 0
    assert "memory_current" not in st and "pids_current" not in st
