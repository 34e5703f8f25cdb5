"""Stats and metrics under load a container makes: a container decides how
many processes and descriptors it has, so a scrape looks at a bounded
number of them, and scrapes from many clients take turns in the thread
pool instead of filling it, so that creating pods and containers goes on
meanwhile."""
import os
import shutil
import signal
import subprocess
import threading
import time

import pytest

from .conftest import wait_for

FDS_MAX = 4096  # src/cri/stats.c STATS_FDS_MAX
PROCS = 200
FDS = 1000  # per process: under the containers' RLIMIT_NOFILE of 1024


def metric(pm, cid, name):
    for p in pm:
        for c in p.container_metrics:
            if c.container_id == cid:
                for m in c.metrics:
                    if m.name == name:
                        return m.value.value
    return None


def test_crowded_container_scraped_by_many(env):
    pb = env.pb
    pod = env.pod()
    # one shell opens FDS descriptors and starts PROCS children that inherit
    # them: PROCS * FDS descriptors in the container
    script = (f"i=10; while [ $i -lt {10 + FDS} ]; do eval \"exec $i</dev/null\"; i=$((i+1)); "
              f"done; i=0; while [ $i -lt {PROCS} ]; do sleep 100000 & i=$((i+1)); done; "
              "exec sleep 100000")
    cid = env.run(pod, "crowd", ["/bin/sh", "-c", script])
    env.wait_procs(cid, PROCS + 1, timeout=120)

    stop = threading.Event()
    seen, errors = [], []

    def scrape():
        while not stop.is_set():
            try:
                pm = env.rs.ListPodSandboxMetrics(pb.ListPodSandboxMetricsRequest(),
                                                  timeout=300).pod_metrics
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)
                return
            seen.append((metric(pm, cid, "container_file_descriptors"),
                         metric(pm, cid, "container_sockets"),
                         metric(pm, cid, "container_threads")))

    scrapers = [threading.Thread(target=scrape) for _ in range(6)]
    for t in scrapers:
        t.start()
    try:
        wait_for(lambda: seen or errors, timeout=300, what="a first scrape")
        # while they scrape, a new pod and container come within a normal
        # deadline
        t0 = time.monotonic()
        pod2 = env.pod("other", timeout=30)
        cid2 = env.rs.CreateContainer(pb.CreateContainerRequest(
            pod_sandbox_id=pod2[0], config=env.config("c", command=["sleep", "100000"]),
            sandbox_config=pod2[1]), timeout=30).container_id
        env.rs.StartContainer(pb.StartContainerRequest(container_id=cid2), timeout=30)
        took = time.monotonic() - t0
        n = len(seen)
        wait_for(lambda: len(seen) >= n + 6 or errors, timeout=300, what="more scrapes")
    finally:
        stop.set()
        for t in scrapers:
            t.join()
    assert not errors, errors
    print(f"pod and container in {took:.2f} s, {len(seen)} scrapes")
    for fds, sockets, threads in seen:
        # each process holds more than FDS descriptors: counted up to the cap
        assert fds == FDS_MAX, fds
        assert sockets is not None and sockets <= fds
        assert threads is not None and threads >= PROCS + 1


class Traced:
    """strace following every thread of the daemon for open calls, into a
    file, for the length of a with block."""

    def __init__(self, env, tmp_path):
        if not shutil.which("strace"):
            pytest.skip("strace is not installed")
        self.pid = env.d.proc.pid
        self.out = tmp_path / "trace"

    def traced(self):
        pid = self.pid
        return all("TracerPid:\t0" not in open(f"/proc/{pid}/task/{t}/status").read()
                   for t in os.listdir(f"/proc/{pid}/task"))

    def __enter__(self):
        self.st = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=open,openat", "-o",
                                    str(self.out), "-p", str(self.pid)],
                                   stderr=subprocess.DEVNULL)
        try:
            wait_for(self.traced, timeout=60, what="strace to attach to the daemon")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        self.st.send_signal(signal.SIGINT)
        self.st.wait(timeout=60)

    def lines(self, text):
        return [ln for ln in open(self.out) if text in ln]


def test_layer_walked_once_for_many_clients(env, tmp_path):
    """Clients asking for a container's stats at once share one walk of its
    writable layer: no two workers walk it, and a job that waited for
    another does not walk it again."""
    pb = env.pb
    pod = env.pod()
    cid = env.run(pod, "files", ["/bin/sh", "-c", "mkdir /d; i=0; while [ $i -lt 3000 ]; do "
                                 ": > /d/f$i; i=$((i+1)); done; exec sleep 100000"])
    files = f"{env.d.root}/containers/{cid}/upper/d"
    wait_for(lambda: os.path.isdir(files) and len(os.listdir(files)) == 3000,
             timeout=120, what="3000 files in the container's layer")
    barrier = threading.Barrier(8)
    got = []

    def ask():
        barrier.wait(timeout=60)
        got.append(env.rs.ListContainerStats(pb.ListContainerStatsRequest(
            filter=pb.ContainerStatsFilter(id=cid)), timeout=120).stats)

    with Traced(env, tmp_path) as t:
        clients = [threading.Thread(target=ask) for _ in range(8)]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
    assert len(got) == 8 and all(len(s) == 1 for s in got)
    assert max(s[0].writable_layer.inodes_used.value for s in got) >= 3000
    walks = t.lines(f'/{cid}/upper"')
    assert len(walks) == 1, walks


def test_mountinfo_read_once_per_scrape(env, tmp_path):
    """Every writable layer is on one filesystem: a scrape reads the mount
    table (megabytes on some nodes) once, not once per container."""
    pb = env.pb
    pod = env.pod()
    for i in range(4):
        env.run(pod, f"c{i}", ["sleep", "100000"])
    with Traced(env, tmp_path) as t:
        pm = env.rs.ListPodSandboxMetrics(pb.ListPodSandboxMetricsRequest(),
                                          timeout=60).pod_metrics
    assert len(pm[0].container_metrics) == 4
    for c in pm[0].container_metrics:
        assert any(m.name == "container_fs_limit_bytes" for m in c.metrics)
    reads = t.lines("mountinfo")
    assert len(reads) == 1, reads
