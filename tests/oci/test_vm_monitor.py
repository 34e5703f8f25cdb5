"""The monitor's OOM report: needs the memory controller, so it runs in the
VM (tests/vm/run-cgroup-tests tests/oci/test_vm_monitor.py) and is skipped,
saying so, on hosts without it."""
import json
import time

import pytest

from ocihelpers import *  # noqa: F401,F403 (fixtures)


def memory_controller():
    for line in open("/proc/self/mountinfo"):
        left, _, right = line.partition(" - ")
        if right.split(" ")[0] == "cgroup2":
            mount = left.split(" ")[4]
            try:
                return "memory" in open(f"{mount}/cgroup.subtree_control").read().split()
            except OSError:
                return False
    return False


@pytest.mark.vm
def test_oom_kill_recorded_by_the_monitor(kinglet, make_bundle, cid, tmp_path):
    if not memory_controller():
        pytest.skip("needs the cgroup v2 memory controller: run tests/vm/run-cgroup-tests "
                    "tests/oci/test_vm_monitor.py")

    def edit(c):
        c["linux"]["resources"] = {"memory": {"limit": 32 << 20, "swap": 32 << 20}}
        c["linux"]["cgroupsPath"] = f"/kinglet-oci-test/{cid}"
    b = make_bundle(["dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"], edit=edit)
    with open(tmp_path / "out", "w") as out:
        kinglet("create", "--bundle", b, cid, stdout=out, stderr=out, check=True, timeout=120)
    kinglet("start", cid, check=True, timeout=120)
    st = kinglet.wait_status(cid, "stopped", timeout=120)
    assert st["exitCode"] == 137 and st.get("exitSignal") == 9, st
    assert st.get("oomKilled") is True, st
    rec = json.loads((kinglet.root / cid / "exit.json").read_text())
    assert rec["oomKilled"] is True
    kinglet("delete", cid, check=True, timeout=120)
