"""ListPodSandboxMetrics with cgroup v2 controllers: the memory, CPU (CFS
throttling and spec), pids and PSI metrics that a hybrid host leaves out,
each against the container's cgroup files, through the same check as
tests/containers/test_metrics.py. tests/vm/run-cgroup-tests runs it (in its
VM where the host lacks controllers); one pod, as the VM's CPU is
emulated."""
from .conftest import vm_marks
from .test_metrics import BASE, DESCRIPTORS, busy_pod, check_pod

pytestmark = vm_marks({"cpu", "memory", "pids"})


def test_v2_metrics_against_the_cgroup(env, tmp_path):
    pb = env.pb
    offered = {n: BASE + x for n, x in DESCRIPTORS.items()}
    res = pb.LinuxContainerResources(memory_limit_in_bytes=96 << 20, cpu_shares=512,
                                     cpu_quota=50000, cpu_period=100000)
    pod, cid, cg = busy_pod(env, tmp_path, resources=res)
    got = check_pod(env, pod, cid, cg, offered)
    # what only controllers give is there, as the container was set up
    assert got[("container_spec_memory_limit_bytes", ())] == 96 << 20
    assert got[("container_spec_cpu_quota", ())] == 50000
    assert got[("container_spec_cpu_period", ())] == 100000
    assert got[("container_spec_cpu_shares", ())] > 0
    assert got[("container_cpu_cfs_periods_total", ())] > 0
    # 1.2 s of CPU at half a CPU: throttled
    assert got[("container_cpu_cfs_throttled_periods_total", ())] > 0
    assert got[("container_memory_cache", ())] >= 0
    assert got[("container_threads", ())] >= 4
    assert ("container_threads_max", ()) in got
    assert ("container_oom_events_total", ()) in got
