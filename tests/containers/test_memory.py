"""The daemon's memory: idle, after image pulls, and with 100 pods.

Targets (issue 9, item 16): under 4 MB of VmRSS idle, before and after
pulls, and under 10 MB with 100 pods. libnftnl is loaded only once a pod
needs it, and pulls run in a short-lived helper process, so the daemon never
maps libcurl, libarchive or the TLS libraries.

RSS is bounded on the plain build only: a sanitizer build's shadow memory
and quarantine count in VmRSS (see Daemon.sanitized in tests/cri). What the
daemon maps is checked on every build.
"""
import concurrent.futures
import os
import subprocess
import time

import pytest

from .conftest import Env, channel, imagelib, wait_for

IDLE_KB = 4 * 1024
PODS_KB = 10 * 1024
PULL_LIBS = ("libcurl", "libarchive", "libcrypto", "libssl", "libgnutls", "libmbed")


def maps(d):
    with open(f"/proc/{d.pid}/maps") as f:
        return f.read()


def netfilter_sockets(d):
    """The daemon's NETLINK_NETFILTER sockets (protocol 12 in
    /proc/PID/net/netlink, matched by inode with its fds)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{d.pid}/fd"):
        try:
            t = os.readlink(f"/proc/{d.pid}/fd/{fd}")
        except OSError:
            continue
        if t.startswith("socket:["):
            inodes.add(t[8:-1])
    with open(f"/proc/{d.pid}/net/netlink") as f:
        rows = [l.split() for l in f.read().splitlines()[1:]]
    return [r for r in rows if r[1] == "12" and r[-1] in inodes]


def settled_rss(d, bound_kb):
    """VmRSS once it has come down to bound_kb (freed memory goes back to
    the kernel asynchronously after a burst of calls), else its last value."""
    try:
        wait_for(lambda: d.rss_kb() < bound_kb, timeout=30, what="RSS to settle")
    except AssertionError:
        pass
    return d.rss_kb()


class NsRegistry:
    """The test images in a registry a pod daemon can reach: pushed to a
    registry on the machine's loopback, then served from the same storage by
    a second registry on the same address inside the daemon's network
    namespace (a pod daemon cannot reach the machine's loopback)."""

    def __init__(self, workdir, images):
        self.workdir = workdir
        self.reg = imagelib.Registry(workdir, "plain").start()
        self.inner = None
        try:
            p = self.reg.pusher()
            for name, img in images.items():
                p.push_image(name, "latest", img)
        finally:
            self.reg.stop()
        self.host = self.reg.host

    def serve_in(self, daemon):
        self.log = open(os.path.join(self.workdir, "inner.log"), "wb")
        self.inner = subprocess.Popen(
            ["nsenter", "-t", str(daemon.holder.pid), "--net", "--",
             imagelib.REGISTRY_BIN, "serve", self.reg.config],
            stdout=self.log, stderr=subprocess.STDOUT)
        probe = ("import socket; socket.create_connection(('127.0.0.1', %d), 1)"
                 % self.reg.port)
        wait_for(lambda: daemon.run("/usr/bin/python3", "-c", probe, check=False).returncode == 0,
                 timeout=20, what="the registry in the daemon's namespace")

    def stop(self):
        if self.inner and self.inner.poll() is None:
            self.inner.terminate()
            try:
                self.inner.wait(10)
            except subprocess.TimeoutExpired:
                self.inner.kill()
                self.inner.wait()
            self.log.close()


@pytest.fixture
def ns_env(tmp_path, test_images, cri, pod_daemon_factory, cgroup_parent):
    """A pod daemon on an empty store, and the test images in a registry it
    reaches."""
    reg = NsRegistry(str(tmp_path / "reg"), test_images)
    d = pod_daemon_factory(["--insecure-registry", reg.host], start=False)
    d.start()
    env = Env(cri, d, {n: f"{reg.host}/{n}:latest" for n in test_images}, cgroup_parent)
    try:
        reg.serve_in(d)
        yield env
        pb = env.pb
        if d.proc.poll() is None:
            for p in env.rs.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items:
                env.rs.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=p.id), timeout=60)
                env.rs.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=p.id),
                                        timeout=60)
            rc = d.stop()
            assert rc == 0, f"daemon exited with {rc}:\n{d.logtext()[-4000:]}"
    finally:
        reg.stop()


def pull(env, ref):
    pb = env.pb
    t0 = time.monotonic()
    r = env.ims.PullImage(pb.PullImageRequest(image=pb.ImageSpec(image=ref)), timeout=120)
    return r.image_ref, time.monotonic() - t0


def test_idle_daemon_with_pod_network_is_small(cri, pod_daemon_factory):
    """Pod networking on (the default), no pod: no libnftnl, no netfilter
    socket, and NetworkReady all the same (the first pod makes the table)."""
    pb = cri.pb
    d = pod_daemon_factory()
    rs = cri.grpc.RuntimeServiceStub(channel(d))

    def ready():
        st = rs.Status(pb.StatusRequest(), timeout=10).status
        return {c.type: c.status for c in st.conditions}.get("NetworkReady")
    wait_for(ready, 15, what="NetworkReady")
    m = maps(d)
    assert "libnft" not in m, "the idle daemon maps libnftnl (or libnftables)"
    for lib in PULL_LIBS:
        assert lib not in m, f"the idle daemon maps {lib}"
    assert not netfilter_sockets(d), "the idle daemon holds a netfilter socket"
    rss = settled_rss(d, IDLE_KB)
    print(f"idle daemon with pod networking: {rss} kB RSS")
    if not d.sanitized():
        assert rss < IDLE_KB, f"idle daemon at {rss} kB RSS"
    assert d.stop() == 0


def test_memory_after_pull_and_with_100_pods(ns_env):
    env = ns_env
    pb = env.pb
    d = env.d
    env.rs.Version(pb.VersionRequest(), timeout=10)
    idle = settled_rss(d, IDLE_KB)
    image_id, took = pull(env, env.refs["busybox"])
    assert image_id.startswith("sha256:")
    # a second image, and the same one again (layers shared, nothing new)
    pull(env, env.refs["entrypoint"])
    _, again = pull(env, env.refs["busybox"])
    m = maps(d)
    for lib in PULL_LIBS:
        assert lib not in m, f"the daemon maps {lib} after a pull"
    after_pull = settled_rss(d, IDLE_KB)
    print(f"idle {idle} kB, after pulls {after_pull} kB RSS; "
          f"pull of busybox {took * 1000:.0f} ms (again {again * 1000:.0f} ms)")
    if not d.sanitized():
        assert idle < IDLE_KB, f"idle daemon at {idle} kB RSS"
        assert after_pull < IDLE_KB, f"daemon at {after_pull} kB RSS after pulls"

    def one(i):
        return env.pod(f"m{i}")[0]
    with concurrent.futures.ThreadPoolExecutor(10) as ex:
        pods = list(ex.map(one, range(100)))
    with_pods = settled_rss(d, PODS_KB)
    print(f"with 100 pods: {with_pods} kB RSS")
    if not d.sanitized():
        assert with_pods < PODS_KB, f"daemon at {with_pods} kB RSS with 100 pods"
    for lib in PULL_LIBS:
        assert lib not in maps(d), f"the daemon maps {lib} with pods"

    def gone(p):
        env.rs.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=p), timeout=60)
        env.rs.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=p), timeout=60)
    with concurrent.futures.ThreadPoolExecutor(10) as ex:
        list(ex.map(gone, pods))
