"""A pod's RuntimeClass overhead as the values in its cgroup. On a hybrid
host test_sandbox.py can only see the warning that the limits are not
enforced; these need cgroup v2 controllers, so tests/vm/run-cgroup-tests
runs them (in its VM where the host lacks them). Kept small: the VM's CPU is
emulated."""
import os

from .test_sandbox import cgroup_parent, info, pod_config, run_pod, runtime, stop_remove  # noqa: F401
from .conftest import vm_marks

pytestmark = vm_marks({"cpu", "cpuset", "memory", "pids"})


def read(cg, name):
    with open(os.path.join(cg, name)) as f:
        return f.read().strip()


def test_overhead_written_to_the_pod_cgroup(cri, pod_daemon_factory, cgroup_parent):  # noqa: F811
    pb = cri.pb
    d = pod_daemon_factory(["--pod-network", "none"])
    rs = runtime(cri, d)
    # Host network: the daemon has pod networking off (the VM is slow; the
    # cgroup is what counts), and its "host" is its own network namespace.
    cfg = pod_config(cri, "oh", cgroup_parent[0], pid=pb.POD, net=pb.NODE)
    cfg.linux.overhead.CopyFrom(pb.LinuxContainerResources(
        memory_limit_in_bytes=64 << 20, cpu_shares=256, cpu_quota=20000, cpu_period=100000,
        cpuset_cpus="0"))
    p = run_pod(cri, rs, cfg)
    try:
        inf = info(cri, rs, p)
        cg = inf["cgroupPath"]
        assert os.path.dirname(cg) == cgroup_parent[1], (cg, cgroup_parent)
        # the pod's init is what the limits hold
        assert str(inf["pid"]) in read(cg, "cgroup.procs").split()
        assert read(cg, "memory.max") == str(64 << 20)
        # shares 256 as cgroup v2 weight along runc 1.3's curve:
        # ceil(10^((l^2 + 125 l) / 612 - 7/34)), l = log2(256) = 8
        assert read(cg, "cpu.weight") == "35"
        assert read(cg, "cpu.max") == "20000 100000"
        assert read(cg, "cpuset.cpus") == "0"
        assert "not available" not in d.logtext() and "not enforced" not in d.logtext()
    finally:
        stop_remove(cri, rs, p)  # before the cgroup parent goes
    assert not os.path.exists(cg)
    assert d.stop() == 0, d.logtext()


def test_pod_without_overhead_is_unlimited(cri, pod_daemon_factory, cgroup_parent):  # noqa: F811
    d = pod_daemon_factory(["--pod-network", "none"])
    rs = runtime(cri, d)
    p = run_pod(cri, rs, pod_config(cri, "free", cgroup_parent[0], net=cri.pb.NODE))
    try:
        cg = info(cri, rs, p)["cgroupPath"]
        assert read(cg, "memory.max") == "max"
        assert read(cg, "cpu.weight") == "100"
        assert read(cg, "cpu.max") == "max 100000"
    finally:
        stop_remove(cri, rs, p)
    assert d.stop() == 0, d.logtext()
