"""Stats and metrics as kubelet reads them: non-zero and sane for a busy
container, writable layer usage, pod network counters, cAdvisor names."""
import os
import time

import pytest

from .conftest import wait_for


def cstats(env, cid):
    return env.rs.ContainerStats(env.pb.ContainerStatsRequest(container_id=cid), timeout=30).stats


def procs_cpu_ns(env, cid):
    """The CPU time of the container's processes, from /proc (utime, stime
    and that of the children they reaped): a reading independent of the
    cgroup's that the daemon reports. Whole clock ticks each."""
    tick = 1e9 / os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in open(env.cgroup_dir(cid) + "/cgroup.procs").read().split():
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone: its time is its parent's cutime now, or was counted
        total += sum(int(x) for x in fields[11:15])
    return total * tick


def bracketed(env, cid):
    """ContainerStats with the container's CPU time read from /proc and the
    wall clock just before and just after it."""
    t0, p0 = time.time_ns(), procs_cpu_ns(env, cid)
    st = cstats(env, cid)
    p1, t1 = procs_cpu_ns(env, cid), time.time_ns()
    return st, (p0, p1), (t0, t1)


def test_busy_container(env):
    pod = env.pod()
    # a loop burns CPU; sort holds 64 MiB of lines, blocked writing them
    # to a pipe nobody reads; the writable layer gets 8 MiB
    cid = env.run(pod, "busy", ["/bin/sh", "-c",
                                "head -c 8388608 /dev/zero > /big; "
                                "(while :; do :; done) & "
                                "head -c 67108864 /dev/zero | tr '\\0' a | fold -w 10000 | sort"
                                " | sleep 1000"])
    env.wait_procs(cid, 3)
    wait_for(lambda: cstats(env, cid).memory.working_set_bytes.value >= 64 << 20, timeout=30,
             what="the 64 MiB to show in the working set")
    a, (pa0, pa1), (ta0, ta1) = bracketed(env, cid)
    # two samples apart by 0.3 s of the container's CPU, however busy the
    # machine is
    wait_for(lambda: procs_cpu_ns(env, cid) > pa1 + 0.3e9, timeout=60,
             what="the container to use 0.3 s of CPU")
    b, (pb0, pb1), (tb0, tb1) = bracketed(env, cid)
    assert a.attributes.id == cid and a.attributes.metadata.name == "busy"
    # the cumulative CPU time is the processes' own, not twice it: within
    # the readings around it (a tick per process and field of slack)
    slack = 4 * 1e9 / os.sysconf("SC_CLK_TCK") * 8
    for st, lo, hi in ((a, pa0, pa1), (b, pb0, pb1)):
        assert lo - slack <= st.cpu.usage_core_nano_seconds.value <= hi + slack, (lo, st, hi)
    assert pa0 > 0.1e9, "the container used no CPU to compare"
    # the rate is the CPU time used between the two samples over the time
    # between them (which the timestamps place right)
    assert ta0 <= a.cpu.timestamp <= ta1 and tb0 <= b.cpu.timestamp <= tb1
    used = b.cpu.usage_core_nano_seconds.value - a.cpu.usage_core_nano_seconds.value
    rate = used / ((b.cpu.timestamp - a.cpu.timestamp) / 1e9)
    assert abs(b.cpu.usage_nano_cores.value - rate) <= 0.01 * rate + 1, (b.cpu, rate)
    assert pb0 - pa1 - slack <= used <= pb1 - pa0 + slack
    assert b.memory.working_set_bytes.value >= 64 << 20
    assert b.memory.working_set_bytes.value < 512 << 20
    assert b.writable_layer.used_bytes.value >= 8 << 20
    assert b.writable_layer.inodes_used.value >= 1
    assert b.writable_layer.fs_id.mountpoint.endswith("/containers")
    lst = env.rs.ListContainerStats(env.pb.ListContainerStatsRequest(), timeout=30).stats
    assert [s.attributes.id for s in lst] == [cid]
    # filters
    f = env.pb.ContainerStatsFilter(pod_sandbox_id="0" * 64)
    assert not env.rs.ListContainerStats(env.pb.ListContainerStatsRequest(filter=f),
                                         timeout=30).stats


def test_pod_stats_and_metrics(env):
    pb = env.pb
    pod = env.pod()
    cid = env.run(pod, "net", ["/bin/sh", "-c",
                               "ping -c 3 -W 1 $(ip route | awk '/default/ {print $3}'); "
                               "sleep 1000 & wait"])
    # two processes whatever the moment: the shell, then ping or sleep (a
    # `sleep` the shell exec'd once ping ended left one, under load)
    env.wait_procs(cid, 2)
    st = wait_for(lambda: (lambda s: s if s.linux.network.default_interface.tx_bytes.value > 0
                           else None)(env.rs.PodSandboxStats(
                               pb.PodSandboxStatsRequest(pod_sandbox_id=pod[0]), timeout=30).stats),
                  what="traffic on the pod's interface")
    assert st.attributes.id == pod[0]
    assert st.linux.network.default_interface.name == "eth0"
    assert st.linux.process.process_count.value >= 2
    assert [c.attributes.id for c in st.linux.containers] == [cid]
    assert st.linux.cpu.usage_core_nano_seconds.value > 0
    lst = env.rs.ListPodSandboxStats(pb.ListPodSandboxStatsRequest(), timeout=30).stats
    assert [s.attributes.id for s in lst] == [pod[0]]
    names = {d.name for d in env.rs.ListMetricDescriptors(
        pb.ListMetricDescriptorsRequest(), timeout=10).descriptors}
    assert {"container_cpu_usage_seconds_total", "container_memory_working_set_bytes",
            "container_network_receive_bytes_total"} <= names
    pm = env.rs.ListPodSandboxMetrics(pb.ListPodSandboxMetricsRequest(), timeout=30).pod_metrics
    assert [p.pod_sandbox_id for p in pm] == [pod[0]]
    cm = {m.name: m for m in pm[0].container_metrics[0].metrics}
    assert cm["container_memory_working_set_bytes"].value.value > 0
    assert cm["container_memory_working_set_bytes"].label_values[:2] == [cid, "net"]
    net = {(m.name, m.label_values[3]) for m in pm[0].metrics}
    assert ("container_network_transmit_bytes_total", "eth0") in net
