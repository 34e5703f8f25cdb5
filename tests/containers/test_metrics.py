"""ListPodSandboxMetrics as kubelet's /metrics/cadvisor serves it: every
descriptor one the daemon can return, with the label keys it returns; for a
pod whose container burns CPU, holds memory, writes a file, listens on a
socket and sends traffic over its own interface, each value against what
the test reads itself from the cgroup, /proc and the pod's network
namespace; values the host cannot give absent rather than zero.
tests/containers/test_vm_metrics.py runs the same check where the cgroup
v2 controllers are (memory, cpu, pids, PSI)."""
import json
import os
import time

from .conftest import wait_for

BASE = ["id", "name", "image"]
# name -> the label keys after the base ones, as cAdvisor has them
DESCRIPTORS = {
    "container_last_seen": [], "container_start_time_seconds": [],
    "container_creation_time_seconds": [],
    "container_cpu_user_seconds_total": [], "container_cpu_system_seconds_total": [],
    "container_cpu_usage_seconds_total": ["cpu"],
    "container_cpu_cfs_periods_total": [], "container_cpu_cfs_throttled_periods_total": [],
    "container_cpu_cfs_throttled_seconds_total": [],
    "container_memory_cache": [], "container_memory_rss": [],
    "container_memory_kernel_usage": [], "container_memory_mapped_file": [],
    "container_memory_swap": [], "container_memory_failcnt": [],
    "container_memory_usage_bytes": [], "container_memory_max_usage_bytes": [],
    "container_memory_working_set_bytes": [],
    "container_memory_failures_total": ["failure_type", "scope"],
    "container_oom_events_total": [],
    "container_fs_inodes_free": ["device"], "container_fs_inodes_total": ["device"],
    "container_fs_limit_bytes": ["device"], "container_fs_usage_bytes": ["device"],
    "container_processes": [], "container_file_descriptors": [], "container_sockets": [],
    "container_threads": [], "container_threads_max": [], "container_ulimits_soft": ["ulimit"],
    "container_pressure_cpu_stalled_seconds_total": [],
    "container_pressure_cpu_waiting_seconds_total": [],
    "container_pressure_memory_stalled_seconds_total": [],
    "container_pressure_memory_waiting_seconds_total": [],
    "container_pressure_io_stalled_seconds_total": [],
    "container_pressure_io_waiting_seconds_total": [],
    "container_spec_memory_limit_bytes": [], "container_spec_memory_reservation_limit_bytes": [],
    "container_spec_memory_swap_limit_bytes": [], "container_spec_cpu_shares": [],
    "container_spec_cpu_quota": [], "container_spec_cpu_period": [],
}
NET = ["receive_bytes", "receive_packets", "receive_packets_dropped", "receive_errors",
       "transmit_bytes", "transmit_packets", "transmit_packets_dropped", "transmit_errors"]
for _n in NET:
    DESCRIPTORS[f"container_network_{_n}_total"] = ["interface"]
COUNTERS = {n for n in DESCRIPTORS if n.endswith("_total") and n != "container_fs_inodes_total"}
COUNTERS.add("container_memory_failcnt")


def read(cg, name):
    try:
        with open(os.path.join(cg, name)) as f:
            return f.read()
    except FileNotFoundError:
        return None


def keyed(text, key):
    for line in (text or "").splitlines():
        k, _, v = line.partition(" ")
        if k == key:
            return int(v)
    return None


def pids_of(cg):
    out = []
    for dp, _, _ in os.walk(cg):
        out += [int(p) for p in (read(dp, "cgroup.procs") or "").split()]
    return out


def proc_field(pid, file, key):
    """A number from /proc/PID/<file> after `key` ("VmRSS:", "Threads:")."""
    try:
        with open(f"/proc/{pid}/{file}") as f:
            for line in f:
                if line.startswith(key):
                    v = line[len(key):].split()[0]
                    return None if v == "unlimited" else int(v)
    except FileNotFoundError:
        pass
    return 0


def mount_source(dpid, path):
    """The source of the mount holding path, as the daemon sees its mounts."""
    st = os.stat(path)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    with open(f"/proc/{dpid}/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[2] == dev:
                return fields[fields.index("-") + 2]
    raise AssertionError(f"no mount of {dev}")


def du(path):
    """Blocks in use below path (hard links once), as du counts them."""
    seen, total = set(), 0
    for dp, dns, fns in os.walk(path):
        for n in [dp] if dp == path else []:
            total += os.lstat(n).st_blocks * 512
        for n in dns + fns:
            st = os.lstat(os.path.join(dp, n))
            if st.st_nlink > 1 and not os.path.isdir(os.path.join(dp, n)):
                if st.st_ino in seen:
                    continue
                seen.add(st.st_ino)
            total += st.st_blocks * 512
    return total


def net_dev(pid):
    """/proc/net/dev of the pod's network namespace (through a process in
    it): interface -> the 16 counters."""
    out = {}
    with open(f"/proc/{pid}/net/dev") as f:
        for line in f.readlines()[2:]:
            name, _, rest = line.partition(":")
            if name.strip() != "lo":
                out[name.strip()] = [int(x) for x in rest.split()]
    return out


def expected(env, cid, cg, init_pid):
    """What the test reads itself for each metric the host can give:
    {(name, extra label values): value}."""
    cpu = read(cg, "cpu.stat")
    mstat = read(cg, "memory.stat")
    mem = read(cg, "memory.current") is not None
    pids = pids_of(cg)
    want = {}

    def put(name, value, *extra):
        want[(name, extra)] = value
    put("container_cpu_user_seconds_total", keyed(cpu, "user_usec") // 10**6)
    put("container_cpu_system_seconds_total", keyed(cpu, "system_usec") // 10**6)
    put("container_cpu_usage_seconds_total", keyed(cpu, "usage_usec") // 10**6, "total")
    cmax, weight = read(cg, "cpu.max"), read(cg, "cpu.weight")
    if cmax is not None and weight is not None:
        quota, period = cmax.split()
        put("container_spec_cpu_period", int(period))
        put("container_spec_cpu_shares", 2 + (int(weight) - 1) * 262142 // 9999)
        if quota != "max":
            put("container_spec_cpu_quota", int(quota))
            put("container_cpu_cfs_periods_total", keyed(cpu, "nr_periods"))
            put("container_cpu_cfs_throttled_periods_total", keyed(cpu, "nr_throttled"))
            put("container_cpu_cfs_throttled_seconds_total",
                keyed(cpu, "throttled_usec") // 10**6)
    if mem:
        current = int(read(cg, "memory.current"))
        put("container_memory_usage_bytes", current)
        put("container_memory_working_set_bytes",
            max(current - keyed(mstat, "inactive_file"), 0))
        put("container_memory_rss", keyed(mstat, "anon"))
        put("container_memory_cache", keyed(mstat, "file"))
        put("container_memory_mapped_file", keyed(mstat, "file_mapped"))
        if keyed(mstat, "kernel") is not None:
            put("container_memory_kernel_usage", keyed(mstat, "kernel"))
        put("container_memory_failcnt", keyed(read(cg, "memory.events"), "max"))
        put("container_oom_events_total", keyed(read(cg, "memory.events"), "oom_kill"))
        if read(cg, "memory.peak") is not None:
            put("container_memory_max_usage_bytes", int(read(cg, "memory.peak")))
        mmax = read(cg, "memory.max").strip()
        put("container_spec_memory_limit_bytes", 0 if mmax == "max" else int(mmax))
        put("container_spec_memory_reservation_limit_bytes", int(read(cg, "memory.min")))
        if read(cg, "memory.swap.current") is not None:
            put("container_memory_swap", int(read(cg, "memory.swap.current")))
            smax = read(cg, "memory.swap.max").strip()
            put("container_spec_memory_swap_limit_bytes", 0 if smax == "max" else int(smax))
        faults = keyed(mstat, "pgfault"), keyed(mstat, "pgmajfault")
    else:
        # a hybrid host: the processes' own resident sets and faults
        rss = sum(proc_field(p, "status", "VmRSS:") for p in pids) * 1024
        put("container_memory_usage_bytes", rss)
        put("container_memory_working_set_bytes", rss)
        put("container_memory_rss", sum(proc_field(p, "status", "RssAnon:") for p in pids) * 1024)
        stats = []
        for p in pids:
            with open(f"/proc/{p}/stat") as f:
                stats.append(f.read().rsplit(")", 1)[1].split())
        faults = sum(int(s[7]) for s in stats), sum(int(s[9]) for s in stats)
    for scope in ("container", "hierarchy"):
        put("container_memory_failures_total", faults[0], "pgfault", scope)
        put("container_memory_failures_total", faults[1], "pgmajfault", scope)
    for res, short in (("cpu", "cpu"), ("memory", "memory"), ("io", "io")):
        text = read(cg, f"{res}.pressure")
        if text is not None:
            tot = {ln.split()[0]: int(ln.split("total=")[1]) for ln in text.splitlines()}
            put(f"container_pressure_{short}_waiting_seconds_total", tot["some"] // 10**6)
            put(f"container_pressure_{short}_stalled_seconds_total", tot["full"] // 10**6)
    put("container_processes", len(pids))
    if read(cg, "pids.current") is not None:
        put("container_threads", int(read(cg, "pids.current")))
        pmax = read(cg, "pids.max").strip()
        put("container_threads_max", 0 if pmax == "max" else int(pmax))
    else:
        put("container_threads", sum(proc_field(p, "status", "Threads:") for p in pids))
    fds = [os.readlink(f"/proc/{p}/fd/{fd}") for p in pids for fd in os.listdir(f"/proc/{p}/fd")]
    put("container_file_descriptors", len(fds))
    put("container_sockets", sum(fd.startswith("socket:") for fd in fds))
    put("container_ulimits_soft", proc_field(init_pid, "limits", "Max open files"),
        "max_open_files")
    ctrs = os.path.join(env.d.root, "containers")
    dev = mount_source(env.d.pid, ctrs)
    vfs = os.statvfs(ctrs)
    put("container_fs_inodes_total", vfs.f_files, dev)
    put("container_fs_inodes_free", vfs.f_ffree, dev)
    put("container_fs_limit_bytes", vfs.f_blocks * vfs.f_frsize, dev)
    put("container_fs_usage_bytes", du(os.path.join(ctrs, cid, "upper")), dev)
    st = env.status(cid).status
    put("container_start_time_seconds", st.started_at // 10**9)
    put("container_creation_time_seconds", st.created_at // 10**9)
    put("container_last_seen", time.time_ns() // 10**9)
    return want


def pod_expected(pid):
    want = {}
    for ifc, v in net_dev(pid).items():
        for n, idx in zip(NET, (0, 1, 3, 2, 8, 9, 11, 10)):
            want[(f"container_network_{n}_total", (ifc,))] = v[idx]
    return want


def check(got, before, after, slack=None):
    """Each value the daemon returned lies between the test's readings
    before and after it; the daemon returned just what the test could
    read."""
    slack = slack or {}
    assert set(got) == set(before), (sorted(set(got) - set(before)),
                                     sorted(set(before) - set(got)))
    for k, v in got.items():
        lo, hi = sorted((before[k], after[k]))
        s = slack.get(k[0], 0)
        assert lo - s <= v <= hi + s, (k, lo, v, hi)


def quiet(cg, comms):
    """The container's processes are just `comms` (the work has ended), all
    asleep: no counter moves but by the odd timer."""
    seen = set()
    for p in pids_of(cg):
        try:
            with open(f"/proc/{p}/stat") as f:
                comm, _, rest = f.read().rpartition(")")
        except OSError:
            return False  # gone meanwhile: not settled yet
        seen.add(comm.split("(", 1)[1])
        if rest.split()[0] not in ("S", "I"):
            return False
    return seen == comms


def busy_pod(env, tmp_path, resources=None, cpu_s=1.2):
    """A pod whose container writes 8 MiB, pings its gateway, listens on a
    TCP port, holds 16 MiB in sort and burns cpu_s of CPU (until the test
    says stop), then sleeps."""
    pb = env.pb
    pod = env.pod()
    trig = tmp_path / "trig"
    trig.mkdir()
    kw = {"linux": pb.LinuxContainerConfig(resources=resources)} if resources else {}
    cid = env.run(pod, "work", ["/bin/sh", "-c",
                                "head -c 8388608 /dev/zero > /big; "
                                "ping -c 3 -W 1 $(ip route | awk '/default/ {print $3}'); "
                                "nc -l -p 8080 & "
                                "head -c 16777216 /dev/zero | tr '\\0' a | fold -w 10000 | sort"
                                " | sleep 100000 & "
                                "while [ ! -e /trig/stop ]; do :; done; exec sleep 100000"],
                  mounts=[pb.Mount(container_path="/trig", host_path=str(trig))], **kw)
    cg = env.cgroup_dir(cid)
    wait_for(lambda: keyed(read(cg, "cpu.stat"), "usage_usec") >= cpu_s * 1e6, timeout=120,
             what=f"{cpu_s} s of CPU in the container")
    (trig / "stop").touch()
    wait_for(lambda: quiet(cg, {"sleep", "nc", "sort"}), timeout=120,
             what="the container's work to end")
    return pod, cid, cg


def metric_map(ms):
    out = {}
    for m in ms:
        out[(m.name, tuple(m.label_values[3:]))] = m
    return out


def test_descriptors_and_values(env, tmp_path):
    pb = env.pb
    descs = env.rs.ListMetricDescriptors(pb.ListMetricDescriptorsRequest(), timeout=10).descriptors
    offered = {d.name: list(d.label_keys) for d in descs}
    assert offered == {n: BASE + x for n, x in DESCRIPTORS.items()}
    helps = {d.name: d.help for d in descs}
    assert helps["container_memory_usage_bytes"].startswith("Current memory usage in bytes")
    assert all(helps.values())
    pod, cid, cg = busy_pod(env, tmp_path)
    check_pod(env, pod, cid, cg, offered)


def check_pod(env, pod, cid, cg, offered):
    pb = env.pb
    info = json.loads(env.status(cid, verbose=True).info["info"])
    init = info["pid"]
    b_ctr, b_pod = expected(env, cid, cg, init), pod_expected(init)
    pm = env.rs.ListPodSandboxMetrics(pb.ListPodSandboxMetricsRequest(), timeout=30).pod_metrics
    a_ctr, a_pod = expected(env, cid, cg, init), pod_expected(init)
    assert [p.pod_sandbox_id for p in pm] == [pod[0]]
    assert [c.container_id for c in pm[0].container_metrics] == [cid]
    ctr = metric_map(pm[0].container_metrics[0].metrics)
    podm = metric_map(pm[0].metrics)
    image = env.status(cid).status.image_ref
    for m in list(ctr.values()) + list(podm.values()):
        # each one offered, its labels as the descriptor names them
        assert m.name in offered and len(m.label_values) == len(offered[m.name]), m
        want_type = pb.COUNTER if m.name in COUNTERS else pb.GAUGE
        assert m.metric_type == want_type, m.name
    for m in ctr.values():
        assert m.label_values[:3] == [cid, "work", image], m
    for m in podm.values():
        assert m.label_values[:3] == [pod[0], "POD", ""], m
    # the inodes of a filesystem other processes write to move meanwhile
    check({k: m.value.value for k, m in ctr.items()}, b_ctr, a_ctr,
          slack={"container_fs_inodes_free": 1000, "container_fs_limit_bytes": 0})
    check({k: m.value.value for k, m in podm.items()}, b_pod, a_pod)
    got = {k: m.value.value for k, m in ctr.items()}
    # the container did what the values say
    assert got[("container_cpu_usage_seconds_total", ("total",))] >= 1
    assert got[("container_memory_working_set_bytes", ())] >= 16 << 20
    assert got[("container_sockets", ())] >= 1
    assert got[("container_processes", ())] == 4  # sleep, nc, sort, sleep
    dev = next(k[1] for k in got if k[0] == "container_fs_usage_bytes")
    assert got[("container_fs_usage_bytes", dev)] >= 8 << 20
    sent = {k: m.value.value for k, m in podm.items()}
    assert sent[("container_network_transmit_packets_total", ("eth0",))] >= 3
    assert sent[("container_network_receive_packets_total", ("eth0",))] >= 3
    return got
