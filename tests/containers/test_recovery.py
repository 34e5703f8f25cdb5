"""SIGKILL of the daemon: containers keep running, their exits are recorded
while it is down, half-done creations are cleaned up."""
import os
import signal

import pytest

from .conftest import channel, wait_for


def test_sigkill_keeps_containers(env):
    pb = env.pb
    pod = env.pod()
    run = env.run(pod, "runs", ["/bin/sleep", "1000"])
    quits = env.run(pod, "quits", ["/bin/sleep", "1000"])
    done = env.run(pod, "done", ["/bin/sh", "-c", "exit 4"])
    created = env.create(pod, None, env.config("created", command=["/bin/true"]))
    env.wait_exited(done)
    env.wait_procs(quits, 1)
    procs = open(env.cgroup_dir(quits) + "/cgroup.procs").read().split()
    env.kill9_restart()
    # while it was down: nothing; now the state is as before
    assert env.status(run).status.state == pb.CONTAINER_RUNNING
    assert env.status(created).status.state == pb.CONTAINER_CREATED
    st = env.status(done).status
    assert st.state == pb.CONTAINER_EXITED and st.exit_code == 4
    # an exit while the daemon is down is recorded by the monitor
    env.d.proc.send_signal(signal.SIGKILL)
    env.d.proc.wait()
    env.d.log.close()
    for p in procs:
        os.kill(int(p), signal.SIGKILL)
    env.d.start()
    env.kill9_restart()
    st = env.status(quits).status
    assert st.state == pb.CONTAINER_EXITED and st.exit_code == 137
    assert st.finished_at > st.started_at
    # and the daemon watches what still runs: a stop works
    env.stop(run, timeout=0)
    assert env.status(run).status.exit_code == 137
    env.start(created)
    env.wait_exited(created)
    assert env.status(created).status.exit_code == 0
    for c in env.list():
        env.remove(c.id)
    assert not env.list()


def held_by_strace(env, syscall, how, path=None):
    """Traces every thread of the daemon (not its children) and holds the
    next `syscall` (delay_enter or delay_exit) for 30 s; with path, the
    next one on that path (a directory fd argument resolved to it counts)."""
    import shutil
    import subprocess
    if shutil.which("strace") is None:
        pytest.skip("strace missing: scripts/install-deps test")
    tids = os.listdir(f"/proc/{env.d.pid}/task")
    args = ["strace", "-qq", "-o", "/dev/null", "-e", f"trace={syscall}",
            "-e", f"inject={syscall}:{how}=30000000:when=1"]
    if path:
        args += ["-P", path]
    for t in tids:
        args += ["-p", t]
    p = subprocess.Popen(args, stderr=subprocess.DEVNULL)
    # strace is attached once the daemon's threads show a tracer
    wait_for(lambda: all(
        "TracerPid:\t0" not in open(f"/proc/{env.d.pid}/task/{t}/status").read() for t in tids),
        what="strace to attach")
    return p


@pytest.mark.parametrize("point", ["mount", "wait4", "record-unnamed", "record-renamed"])
def test_sigkill_during_create(env, point):
    """SIGKILL while CreateContainer is (a) mounting the rootfs, (b) done
    with the executor but not with the record, (c) writing the record, its
    temporary complete but not renamed into place, (d) done with the record
    (renamed) but not with the call: after a restart nothing of (a), (b) and
    (c) is left, and (d) is a created container that can be started or
    removed. The daemon is held at each point (strace) and killed there: the
    call never returns."""
    import threading
    import grpc
    pb = env.pb
    pod = env.pod()
    before = env.d.own_mounts("overlay")
    syscall, how = {"mount": ("mount", "delay_enter"), "wait4": ("wait4", "delay_exit"),
                    "record-unnamed": ("renameat", "delay_enter"),
                    "record-renamed": ("renameat", "delay_exit")}[point]
    bundles = os.path.join(env.d.state, "containers")
    recs = os.path.join(env.d.root, "containers")
    path = None
    if syscall == "renameat":
        os.makedirs(recs, 0o700, exist_ok=True)
        path = recs  # not the bundle's or another file's rename
    tracer = held_by_strace(env, syscall, how, path)
    errors = []

    def create():
        try:
            env.create(pod, None, env.config("cut", command=["/bin/sleep", "1000"]))
        except Exception as e:  # the daemon dies under it
            errors.append(e)
    t = threading.Thread(target=create, daemon=True)
    t.start()

    def records(tmp):
        names = os.listdir(recs) if os.path.isdir(recs) else []
        return [f for f in names if (".json.tmp." in f) == tmp and ".json" in f]
    if point == "mount":
        wait_for(lambda: os.path.isdir(bundles) and os.listdir(bundles), what="the bundle")
    elif point == "wait4":
        wait_for(env.monitors, what="the container's monitor")
    elif point == "record-unnamed":
        # held before its rename: the whole record is there, by its
        # temporary name only
        wait_for(lambda: records(tmp=True), what="the record's temporary")
        assert not records(tmp=False)
    else:
        wait_for(lambda: records(tmp=False), what="the record")
        assert not records(tmp=True)
    assert t.is_alive() and not errors, "the call ended before the daemon was killed"
    env.d.proc.send_signal(signal.SIGKILL)
    env.d.proc.wait()
    tracer.wait(30)
    t.join(30)
    assert len(errors) == 1 and isinstance(errors[0], grpc.RpcError), errors
    assert errors[0].code() == grpc.StatusCode.UNAVAILABLE, errors[0]
    env.d.log.close()
    env.d.start()
    env.rs = env.cri.grpc.RuntimeServiceStub(channel(env.d))
    cs = env.list()
    if point == "record-renamed":
        assert [c.state for c in cs] == [pb.CONTAINER_CREATED]
        env.start(cs[0].id)
        assert env.status(cs[0].id).status.state == pb.CONTAINER_RUNNING
        env.remove(cs[0].id)
    else:
        assert len(cs) == 0
        wait_for(lambda: not os.listdir(bundles), what="the bundle to go")
    ls = lambda d: os.listdir(d) if os.path.isdir(d) else []
    assert not ls(os.path.join(env.d.state, "oci"))
    assert not ls(os.path.join(env.d.root, "containers"))
    assert not env.monitors()
    assert env.d.own_mounts("overlay") == before
    # and it works as before
    cid = env.run(pod, "after", ["/bin/true"])
    assert env.wait_exited(cid).exit_code == 0


def test_reboot(env):
    """A reboot: every process gone, the volatile state directory empty, the
    root directory kept. Containers come back exited, the pod not ready, and
    all of it is removable."""
    pb = env.pb
    pod = env.pod()
    run = env.run(pod, "runs", ["/bin/sleep", "1000"])
    done = env.run(pod, "done", ["/bin/sh", "-c", "exit 4"])
    env.wait_exited(done)
    env.wait_procs(run, 1)
    procs = [int(p) for p in open(env.cgroup_dir(run) + "/cgroup.procs").read().split()]
    monitors = env.monitors()
    cgroup = env.cgroup_dir(run)
    env.d.proc.send_signal(signal.SIGKILL)
    env.d.proc.wait()
    env.d.log.close()
    for p in procs + monitors:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_for(lambda: not open(cgroup + "/cgroup.procs").read().strip(),
             what="the container's processes to go")
    os.rmdir(cgroup)
    # what a reboot takes: the mounts below the state directory and its files
    env.d.run("sh", "-c", f"grep -o ' {env.d.state}[^ ]*' /proc/self/mountinfo | sort -r | "
              "xargs -r -n1 umount -l")
    env.d.run("sh", "-c", f"rm -rf {env.d.state}/*")
    env.d.start()
    env.rs = env.cri.grpc.RuntimeServiceStub(channel(env.d))
    st = env.status(run).status
    assert st.state == pb.CONTAINER_EXITED
    # what containerd reports for a container whose task is gone after a
    # restart (unknownExitCode, unknownExitReason)
    assert (st.exit_code, st.reason) == (255, "Unknown")
    assert st.finished_at >= st.started_at > 0
    assert env.status(done).status.exit_code == 4
    ps = env.rs.PodSandboxStatus(pb.PodSandboxStatusRequest(pod_sandbox_id=pod[0]),
                                 timeout=10).status
    assert ps.state == pb.SANDBOX_NOTREADY
    for c in (run, done):
        env.remove(c)
    env.rs.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=pod[0]), timeout=60)
    env.rs.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=pod[0]), timeout=60)
    assert not env.list()
    assert not os.listdir(os.path.join(env.d.root, "containers"))


def test_unloaded_record_keeps_what_it_names(env):
    """A container record the daemon cannot read at start (here its
    configuration does not decode) leaves the container ignored, not gone:
    recovery takes only what no record names for the remains of a creation
    cut short, so the bundle, the writable layer, the executor's state and
    the image hold stay; once the record reads again, the container is
    back as it was, its log with it."""
    import base64
    import json
    pb = env.pb
    pod = env.pod()
    cid = env.run(pod, "kept", ["/bin/sh", "-c", "echo hello; echo data > /made; exit 3"])
    before = env.wait_exited(cid)
    named = [env.bundle(cid), os.path.join(env.d.root, "containers", cid),
             os.path.join(env.d.state, "oci", cid)]
    assert all(os.path.exists(p) for p in named), named
    env.kill9()
    path = os.path.join(env.d.root, "containers", cid + ".json")
    with open(path) as f:
        good = f.read()
    rec = json.loads(good)
    rec["config"] = base64.b64encode(b"\xff\xff\xff\xff").decode()
    with open(path, "w") as f:
        json.dump(rec, f)
    env.restart()
    # (calls wait for recovery: once one is answered, it is over)
    assert cid not in {c.id for c in env.list()}
    assert f"container `{cid}`: unreadable configuration" in env.d.logtext()
    missing = [p for p in named if not os.path.exists(p)]
    assert not missing, f"removed with the record still there: {missing}"
    assert "image hold(s) of containers that were never created" not in env.d.logtext()
    assert os.path.exists(path)
    env.kill9()
    with open(path, "w") as f:
        f.write(good)
    env.restart()
    st = env.status(cid).status
    assert st.state == pb.CONTAINER_EXITED
    assert (st.exit_code, st.started_at, st.finished_at, st.image_ref) == \
        (3, before.started_at, before.finished_at, before.image_ref)
    with open(st.log_path) as f:
        assert "hello" in f.read()
    layer = os.path.join(env.d.root, "containers", cid)
    assert any("made" in files for _, _, files in os.walk(layer)), "the writable layer's file"
    env.remove(cid)
    assert not any(os.path.exists(p) for p in named)


# Past what kinglet once loaded at start (16,384 container records): the
# node of the issue, with 20,000 exited containers.
MANY = 20000


def test_every_record_is_loaded_at_start(env):
    """Every container record is loaded at start, however many there are
    (containerd has no limit either): containers created past any count
    come back after a restart with their state, and nothing they hold is
    taken for a stranger's. The daemon's memory for each exited container
    is measured and bounded."""
    from .conftest import clone_exited, unclone
    pb = env.pb
    pod = env.pod()
    real = [env.run(pod, f"real{i}", ["/bin/sh", "-c", f"echo out{i}; exit {i + 1}"])
            for i in range(3)]
    before = {c: env.wait_exited(c) for c in real}
    env.kill9_restart()
    assert {c.id for c in env.list()} == set(real)
    rss0 = env.d.rss_kb()
    env.kill9()
    ids = clone_exited(env, real[0], MANY)
    try:
        env.restart()
        ch = channel(env.d, **{"grpc.max_receive_message_length": 64 << 20})
        rs = env.cri.grpc.RuntimeServiceStub(ch)
        got = set()
        for chunk in rs.StreamContainers(pb.StreamContainersRequest(), timeout=300):
            got.update(c.id for c in chunk.containers)
        assert len(got) == MANY + len(real) and got == set(ids) | set(real)
        for c in real:
            st = env.status(c).status
            assert (st.state, st.exit_code, st.finished_at) == \
                (pb.CONTAINER_EXITED, before[c].exit_code, before[c].finished_at)
            assert os.path.isdir(env.bundle(c))
            assert os.path.isdir(os.path.join(env.d.root, "containers", c))
        assert "unreadable" not in env.d.logtext()
        per = (env.d.rss_kb() - rss0) * 1024 / MANY
        print(f"RSS {rss0} kB with {len(real)} containers, {env.d.rss_kb()} kB with "
              f"{MANY + len(real)}: {per:.0f} bytes per exited container")
        if not env.d.sanitized():
            assert per < 8192, f"{per:.0f} bytes of RSS per exited container record"
    finally:
        if env.d.proc.poll() is None:
            env.kill9()
        unclone(env, ids)
        env.restart()
