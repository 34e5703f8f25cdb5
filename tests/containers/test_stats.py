"""Stats and metrics as kubelet reads them: non-zero and sane for a busy
container, writable layer usage, pod network counters, cAdvisor names."""
import time

import pytest

from .conftest import wait_for


def cstats(env, cid):
    return env.rs.ContainerStats(env.pb.ContainerStatsRequest(container_id=cid), timeout=30).stats


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
    a = cstats(env, cid)
    time.sleep(0.5)  # two samples apart: the rate needs an interval
    b = cstats(env, cid)
    assert a.attributes.id == cid and a.attributes.metadata.name == "busy"
    assert b.cpu.usage_core_nano_seconds.value > a.cpu.usage_core_nano_seconds.value > 0
    # one core spinning: between 0.2 and 2.5 cores on a noisy 2-core machine
    assert 0.2e9 < b.cpu.usage_nano_cores.value < 2.5e9
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
