"""Containers with cgroup v2 controllers: an OOM kill reported as
OOMKilled (also after the daemon was SIGKILLed and started again, and for a
kill that happened while it was down), the resources written into the
container's cgroup and seen from inside it, stats from it. tests/vm/run-cgroup-tests runs these (in its VM where the host lacks
controllers); kept small, as the VM's CPU is emulated."""
import os

from .conftest import vm_marks, wait_for

pytestmark = vm_marks({"cpu", "memory", "pids"})


def read(cg, name):
    with open(os.path.join(cg, name)) as f:
        return f.read().strip()


def test_oom_killed_limits_and_stats(env, tmp_path):
    pb = env.pb
    pod = env.pod()
    res = pb.LinuxContainerResources(memory_limit_in_bytes=32 << 20, cpu_shares=512,
                                     cpu_quota=50000, cpu_period=100000)
    busy = env.run(pod, "busy", ["/bin/sh", "-c", "while :; do :; done"],
                   linux=pb.LinuxContainerConfig(resources=res))
    cg = env.cgroup_dir(busy)
    assert read(cg, "memory.max") == str(32 << 20)
    assert read(cg, "cpu.weight") == "59"  # 512 shares along runc 1.3's curve
    assert read(cg, "cpu.max") == "50000 100000"
    st = wait_for(lambda: (lambda s: s if s.cpu.usage_core_nano_seconds.value > 0 and
                           s.memory.working_set_bytes.value > 0 else None)(
        env.rs.ContainerStats(pb.ContainerStatsRequest(container_id=busy), timeout=30).stats),
        what="cpu and memory figures", timeout=60)
    assert st.memory.working_set_bytes.value < 32 << 20
    # 64 MiB in one buffer under a 32 MiB limit: the kernel kills it
    hog = env.run(pod, "hog", ["/bin/dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"],
                  linux=pb.LinuxContainerConfig(resources=pb.LinuxContainerResources(
                      memory_limit_in_bytes=32 << 20, memory_swap_limit_in_bytes=32 << 20)))
    st = env.wait_exited(hog, timeout=120)
    assert st.reason == "OOMKilled" and st.exit_code == 137, (st.reason, st.exit_code)
    env.stop(busy)
    # a plain SIGKILL under a limit is no OOM kill
    assert env.status(busy).status.reason != "OOMKilled"

    # The same hog, set off only while the daemon is down (it waits for a
    # file): its monitor alone sees the kill.
    trig = tmp_path / "trig"
    trig.mkdir()
    late = env.run(pod, "late", ["/bin/sh", "-c", "until [ -e /trig/go ]; do sleep 0.05; done; "
                                 "exec /bin/dd if=/dev/zero of=/dev/null bs=64M count=1"],
                   mounts=[pb.Mount(container_path="/trig", host_path=str(trig))],
                   linux=pb.LinuxContainerConfig(resources=pb.LinuxContainerResources(
                       memory_limit_in_bytes=32 << 20, memory_swap_limit_in_bytes=32 << 20)))
    late_cg = env.cgroup_dir(late)
    env.kill9()
    (trig / "go").touch()
    # the kill seen in the cgroup, and the monitor gone with the container
    wait_for(lambda: not os.path.exists(late_cg) or "populated 0" in read(late_cg, "cgroup.events"),
             what="the late hog to be killed", timeout=120)
    env.restart()
    for cid in (hog, late):
        st = env.wait_exited(cid, timeout=120)
        assert st.reason == "OOMKilled" and st.exit_code == 137, (cid[:12], st.reason, st.exit_code)


SEEN = ("memory.max", "cpu.max", "cpu.weight")


def test_limits_seen_inside_the_container(env):
    """kubectl's resources.limits of 64Mi / 500m (kubelet: 512 shares, a
    50 ms quota per 100 ms) as the container sees them in its own
    /sys/fs/cgroup (its cgroup namespace's root, mounted there), from its
    first process and from an exec."""
    pb = env.pb
    res = pb.LinuxContainerResources(memory_limit_in_bytes=64 << 20, cpu_shares=512,
                                     cpu_quota=50000, cpu_period=100000)
    show = "; ".join(f"echo {f}=$(cat /sys/fs/cgroup/{f})" for f in SEEN)
    cid = env.run(env.pod(), "limits", ["/bin/sh", "-c", show + "; exec sleep 100000"],
                  linux=pb.LinuxContainerConfig(resources=res))
    want = {"memory.max": str(64 << 20), "cpu.max": "50000 100000", "cpu.weight": "59"}
    log = env.status(cid).status.log_path

    def seen_by_init():
        lines = [l.split(" ", 3)[-1] for l in open(log).read().splitlines()]
        got = dict(l.split("=", 1) for l in lines if "=" in l)
        return got if set(got) == set(SEEN) else None
    assert wait_for(seen_by_init, what="the container's own view of its limits") == want
    r = env.rs.ExecSync(pb.ExecSyncRequest(container_id=cid, cmd=["/bin/sh", "-c", show],
                                           timeout=60), timeout=120)
    assert r.exit_code == 0, r.stderr
    assert dict(l.split("=", 1) for l in r.stdout.decode().splitlines()) == want
    # the namespace's root: the host's cgroup tree above it is out of sight
    r = env.rs.ExecSync(pb.ExecSyncRequest(container_id=cid, cmd=["/bin/cat", "/proc/self/cgroup"],
                                           timeout=60), timeout=120)
    assert r.stdout.decode().strip() == "0::/", r.stdout
