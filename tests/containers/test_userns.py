"""User namespaces (KEP-127, GA in Kubernetes 1.36; `hostUsers: false`)
through the real gRPC client: a pod whose userns_options say POD with one
uid and one gid mapping gets a user namespace of its own with exactly
those mappings; its containers join it, their rootfs and bind volumes are
idmapped mounts (nothing is chowned), exec runs inside it; anything else
than one mapping each of container ID 0 (or NODE without mappings) is
INVALID_ARGUMENT, as the CRI validation suite expects."""
import os

import grpc
import pytest

from .conftest import wait_for
from .test_streaming import exec_url, spdy, spdyclient  # noqa: F401 (a fixture)

HOST_ID = 200000  # the pod's container ID 0 on the host
LENGTH = 65536


def userns(env, mode=None, uids=None, gids=None):
    pb = env.pb
    if uids is None:
        uids = [pb.IDMapping(host_id=HOST_ID, container_id=0, length=LENGTH)]
    if gids is None:
        gids = [pb.IDMapping(host_id=HOST_ID, container_id=0, length=LENGTH)]
    return pb.UserNamespace(mode=pb.POD if mode is None else mode, uids=uids, gids=gids)


def userns_pod(env, us=None, net=None, pid=None, ipc=None):
    """A pod like env.pod(), with userns_options."""
    pb = env.pb
    pod_id, cfg = None, None
    import uuid
    uid = uuid.uuid4().hex
    ns = pb.NamespaceOption(network=net if net is not None else pb.POD,
                            pid=pid if pid is not None else pb.CONTAINER,
                            ipc=ipc if ipc is not None else pb.POD,
                            userns_options=us if us is not None else userns(env))
    cfg = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name="u", namespace="default", uid=uid),
        hostname="u", log_directory=str(env.logdir / uid),
        linux=pb.LinuxPodSandboxConfig(
            cgroup_parent=env.cgroup_parent,
            security_context=pb.LinuxSandboxSecurityContext(namespace_options=ns)))
    pod_id = env.rs.RunPodSandbox(pb.RunPodSandboxRequest(config=cfg), timeout=60).pod_sandbox_id
    return pod_id, cfg


def sh(env, cid, script):
    r = env.rs.ExecSync(env.pb.ExecSyncRequest(container_id=cid, cmd=["/bin/sh", "-c", script]),
                        timeout=60)
    return r.exit_code, r.stdout.decode(), r.stderr.decode()


def container_pid(env, cid):
    import json
    return json.loads(env.status(cid, verbose=True).info["info"])["pid"]


def proc_status_ids(pid, field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return [int(x) for x in line.split()[1:]]
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def maps(pid, which):
    return [l.split() for l in open(f"/proc/{pid}/{which}").read().splitlines()]


def test_pod_in_user_namespace(env, tmp_path):
    """The container's root is HOST_ID on the host, in a user namespace
    with exactly the pod's mappings; image files are root's inside (an
    idmapped rootfs); a file written on a plain hostPath volume is
    HOST_ID's on the host; on a volume with the pod's mappings (what
    kubelet sends for every volume of such a pod) the host's root files
    are root's inside and the pod's root writes as host root; exec runs
    inside the namespace too."""
    plain, mapped = tmp_path / "plain", tmp_path / "mapped"
    for d in (plain, mapped):
        d.mkdir()
        os.chmod(d, 0o777)
        (d / "hostfile").write_text("from the host\n")
    pod = userns_pod(env)
    pb = env.pb
    idm = [pb.IDMapping(host_id=HOST_ID, container_id=0, length=LENGTH)]
    cid = env.create(pod, None, env.config(
        "c", command=["/bin/sh", "-c",
                      "echo hi > /plain/written; echo hi > /mapped/written; exec sleep 1000"],
        mounts=[pb.Mount(container_path="/plain", host_path=str(plain)),
                pb.Mount(container_path="/mapped", host_path=str(mapped), uidMappings=idm,
                         gidMappings=idm)]))
    env.start(cid)
    wait_for(lambda: (mapped / "written").exists(), timeout=60, what="the container's writes")
    pid = container_pid(env, cid)
    assert maps(pid, "uid_map") == [["0", str(HOST_ID), str(LENGTH)]]
    assert maps(pid, "gid_map") == [["0", str(HOST_ID), str(LENGTH)]]
    assert proc_status_ids(pid, "Uid") == [HOST_ID] * 4
    assert proc_status_ids(pid, "Gid") == [HOST_ID] * 4
    # cloned from inside the pod's user namespace, still in its own cgroup
    cg = open(f"/proc/{pid}/cgroup").read()
    assert env.cgroup_parent + "/" + cid in cg, cg
    st = os.stat(plain / "written")
    assert (st.st_uid, st.st_gid) == (HOST_ID, HOST_ID)
    st = os.stat(mapped / "written")
    assert (st.st_uid, st.st_gid) == (0, 0)
    # the image's files and the host's, through idmapped mounts: root's
    # inside; the plain volume's host-root file is nobody's
    code, out, err = sh(env, cid, "stat -c '%u %g' / /bin/busybox /etc/hosts /mapped/hostfile "
                        "/plain/hostfile; id -u; cat /proc/self/uid_map")
    assert code == 0, err
    lines = out.split("\n")
    assert lines[:6] == ["0 0", "0 0", "0 0", "0 0", "65534 65534", "0"], out
    assert lines[6].split() == ["0", str(HOST_ID), str(LENGTH)], out
    # the container's own writes to its rootfs work, and are root's inside
    code, out, err = sh(env, cid, "echo x > /newfile && stat -c '%u %g' /newfile")
    assert (code, out) == (0, "0 0\n"), err


def test_shared_pid_namespace_and_streaming_exec(env, spdyclient):
    """A pod with a shared PID namespace: its init, too, is in the pod's
    user namespace, unprivileged there (and so on the host); a container
    joins both; a streaming exec runs in the user namespace as its root."""
    pb = env.pb
    pod_id, cfg = userns_pod(env, pid=pb.POD)
    cid = env.run((pod_id, cfg), "c", ["/bin/sleep", "100000"])
    st = env.rs.PodSandboxStatus(pb.PodSandboxStatusRequest(pod_sandbox_id=pod_id,
                                                            verbose=True), timeout=10)
    import json
    init = json.loads(st.info["info"])["pid"]
    assert maps(init, "uid_map") == [["0", str(HOST_ID), str(LENGTH)]]
    assert proc_status_ids(init, "Uid")[0] == HOST_ID + 65535
    code, out, err = sh(env, cid, "cat /proc/1/status | grep ^Uid; echo $$")
    assert code == 0, err
    assert out.split("\n")[0].split()[1] == "65535", out
    p = spdy(env, spdyclient, "exec", exec_url(env, cid, [
        "/bin/sh", "-c", "id -u; cat /proc/self/uid_map; stat -c '%u' /bin/busybox"]))
    lines = p.stdout.decode().split("\n")
    assert lines[0] == "0" and lines[2] == "0", p
    assert lines[1].split() == ["0", str(HOST_ID), str(LENGTH)], p


@pytest.mark.parametrize("case", ["two_uids", "two_gids", "root_unmapped", "no_gids",
                                  "mode_container", "mode_target", "node_with_mappings",
                                  "host_network", "short_uids", "short_gids"])
def test_refusals(env, case):
    """What the suite and containerd refuse is INVALID_ARGUMENT, and the
    daemon keeps no trace of the pod."""
    pb = env.pb
    m = pb.IDMapping(host_id=HOST_ID, container_id=0, length=LENGTH)
    m2 = pb.IDMapping(host_id=HOST_ID + LENGTH, container_id=LENGTH, length=LENGTH)
    kw = {}
    us = {
        "two_uids": lambda: userns(env, uids=[m, m2]),
        "two_gids": lambda: userns(env, gids=[m, m2]),
        "root_unmapped": lambda: userns(env, uids=[pb.IDMapping(host_id=HOST_ID, container_id=1,
                                                                length=LENGTH)]),
        "no_gids": lambda: userns(env, gids=[]),
        "mode_container": lambda: userns(env, mode=pb.CONTAINER),
        "mode_target": lambda: userns(env, mode=pb.TARGET),
        "node_with_mappings": lambda: userns(env, mode=pb.NODE),
        "host_network": lambda: userns(env),
        # kubelet maps 65536 or more; the pod's init runs as 65535
        "short_uids": lambda: userns(env, uids=[pb.IDMapping(host_id=HOST_ID, container_id=0,
                                                             length=LENGTH - 1)]),
        "short_gids": lambda: userns(env, gids=[pb.IDMapping(host_id=HOST_ID, container_id=0,
                                                             length=1000)]),
    }[case]()
    if case == "host_network":
        kw["net"] = pb.NODE
    with pytest.raises(grpc.RpcError) as e:
        userns_pod(env, us, **kw)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    if case.startswith("short_"):
        assert "is below 65536" in e.value.details(), e.value.details()
    assert not env.rs.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items


@pytest.mark.parametrize("case", ["too_many", "overflow", "empty", "uids_only"])
def test_mount_mapping_refusals(env, tmp_path, case):
    """A volume's ID mappings are checked before anything is built: at
    most 340 (a user namespace's map), each a range, both lists or none;
    INVALID_ARGUMENT naming the mount, and no container left."""
    pb = env.pb
    m = pb.IDMapping(host_id=HOST_ID, container_id=0, length=LENGTH)
    uids, gids, words = {
        "too_many": ([pb.IDMapping(host_id=HOST_ID + i, container_id=i, length=1)
                      for i in range(341)], [m], "341 uidMappings, more than 340"),
        "overflow": ([m], [pb.IDMapping(host_id=2**32 - 10, container_id=0, length=LENGTH)],
                     "gidMappings[0] (container ID 0, host ID 4294967286, length 65536) is "
                     "not a range"),
        "empty": ([pb.IDMapping(host_id=HOST_ID, container_id=0, length=0)], [m],
                  "uidMappings[0] (container ID 0, host ID 200000, length 0) is not a range"),
        "uids_only": ([m], [], "an idmapped mount needs both uidMappings and gidMappings (got 1 and 0)"),
    }[case]
    pod = userns_pod(env)
    mounts = [pb.Mount(container_path="/v", host_path=str(tmp_path), uidMappings=uids,
                       gidMappings=gids)]
    with pytest.raises(grpc.RpcError) as e:
        env.create(pod, None, env.config("c", command=["/bin/sleep", "100000"], mounts=mounts))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert "mounts[0]: " + words in e.value.details(), e.value.details()
    assert not env.list()


def test_proc_mount_unmasked(env):
    """procMount Unmasked (KEP-4265): kubelet sends empty masked and
    read-only path lists, allowed with a user namespace only; the
    container's /proc is then as the kernel shows it. Default sends the
    lists, which are applied."""
    pb = env.pb
    pod = userns_pod(env)
    unmasked = env.run(pod, "u", ["/bin/sleep", "100000"])
    sc = pb.LinuxContainerSecurityContext(masked_paths=["/proc/keys"],
                                          readonly_paths=["/proc/sys"])
    masked = env.create(pod, None, env.config("m", command=["/bin/sleep", "100000"],
                                              linux=pb.LinuxContainerConfig(security_context=sc)))
    env.start(masked)
    # a mask is /dev/null bound over the file: a character device
    script = "stat -c %F /proc/keys; grep -c ' /proc/sys ' /proc/self/mountinfo"
    code, out, err = sh(env, unmasked, script)
    assert (code, out.split("\n")[:2]) == (1, ["regular empty file", "0"]), (out, err)
    code, out, err = sh(env, masked, script)
    assert (code, out.split("\n")[:2]) == (0, ["character special file", "1"]), (out, err)


def test_daemon_restart_keeps_the_pod_user_namespace(env):
    """After a restart of the daemon (SIGKILL), a new container of the pod
    joins the same user namespace as the one that kept running."""
    pod = userns_pod(env)
    first = env.run(pod, "a", ["/bin/sleep", "100000"])
    env.kill9_restart()
    second = env.run(pod, "b", ["/bin/sleep", "100000"])
    a, b = container_pid(env, first), container_pid(env, second)
    assert os.stat(f"/proc/{a}/ns/user").st_ino == os.stat(f"/proc/{b}/ns/user").st_ino
    assert maps(b, "uid_map") == [["0", str(HOST_ID), str(LENGTH)]]
    code, out, err = sh(env, second, "stat -c '%u' /bin/busybox")
    assert (code, out) == (0, "0\n"), err


@pytest.mark.parametrize("pod_kind", ["userns", "host"])
def test_init_is_cloned_into_its_cgroup_not_moved(env, tmp_path, pod_kind):
    """The init is cloned straight into its cgroup (clone3
    CLONE_INTO_CGROUP, from inside the pod's user namespace too), and
    nothing writes cgroup.procs during CreateContainer: such a write takes
    the cgroup threadgroup lock, an RCU grace period (10 ms and more on a
    busy machine) even for a process already in place, which made
    containers of user-namespace pods start nearly twice as slowly. strace
    follows every thread and child of the daemon for the one create."""
    import shutil
    import signal
    import subprocess
    if shutil.which("strace") is None:
        pytest.skip("strace missing: scripts/install-deps test")
    if env.d.sanitized():
        # the executor's LeakSanitizer stops the world with ptrace at exit,
        # which fails under strace (exit status 1)
        pytest.skip("a sanitizer build's executor cannot exit under strace")
    pod = userns_pod(env) if pod_kind == "userns" else env.pod()
    out = tmp_path / "trace"
    tids = os.listdir(f"/proc/{env.d.pid}/task")
    args = ["strace", "-f", "-qq", "-o", str(out), "-e", "trace=openat,open"]
    for t in tids:
        args += ["-p", t]
    tracer = subprocess.Popen(args, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: all(
            "TracerPid:\t0" not in open(f"/proc/{env.d.pid}/task/{t}/status").read()
            for t in tids), what="strace to attach")
        cid = env.create(pod, None, env.config("c", command=["/bin/sleep", "100000"]))
    finally:
        tracer.send_signal(signal.SIGINT)  # detaches: the daemon runs on
        tracer.wait(60)
    lines = out.read_text().splitlines()
    assert any("config.json" in l for l in lines), "strace saw no create"
    moves = [l for l in lines if "cgroup.procs" in l and "O_WRONLY" in l]
    assert moves == [], moves
    env.start(cid)
    pid = container_pid(env, cid)
    assert env.cgroup_parent + "/" + cid in open(f"/proc/{pid}/cgroup").read()


def test_image_volumes_idmapped(env):
    """Image volumes (KEP-4639) of such a pod: their layers idmapped too,
    so the image's files are root's inside, read-only, for a two-layer
    image (an overlay) and a one-layer one (the layer's tree)."""
    pb = env.pb
    pod = userns_pod(env)
    vols = [pb.Mount(container_path=p, image=pb.ImageSpec(image=env.refs[img]), readonly=True)
            for p, img in (("/vol", "volume"), ("/bb", "busybox"))]
    cid = env.create(pod, None, env.config("c", command=["/bin/sleep", "100000"], mounts=vols))
    env.start(cid)
    code, out, err = sh(env, cid, "stat -c '%u %g' /vol/top /bb/bin/busybox; "
                        "touch /vol/x 2>/dev/null || echo ro")
    assert (code, out) == (0, "0 0\n0 0\nro\n"), err


def test_node_mode_is_the_host(env):
    """NODE without mappings: no user namespace, as before."""
    pb = env.pb
    pod = userns_pod(env, pb.UserNamespace(mode=pb.NODE))
    cid = env.run(pod, "c", ["/bin/sleep", "100000"])
    assert maps(container_pid(env, cid), "uid_map") == [["0", "0", "4294967295"]]


def test_status_reports_support(env):
    """Status: user namespaces for the default handler and every other;
    not with the host network."""
    r = env.rs.Status(env.pb.StatusRequest(), timeout=10)
    assert r.runtime_handlers, r
    for h in r.runtime_handlers:
        assert h.features.user_namespaces, h
    assert not r.features.user_namespaces_host_network


def pod_dir(env, pod):
    return os.path.join(env.d.state, "pods", pod[0])


def test_pod_files_are_not_host_root_files(env):
    """The pod's /etc files and /dev/shm are its root's, not bound through
    an idmapping: through one, the container's root wrote them as the
    host's root, and could leave a set-user-ID file of the host's uid 0
    with the content of its choice in the daemon's state, or hand a file
    to any host uid below the mapping's length. What the container's root
    does to them stays its own uid's on the host."""
    pod = userns_pod(env)
    cid = env.run(pod, "c", ["/bin/sleep", "100000"])
    code, out, err = sh(env, cid, "stat -c '%u %g %a' /etc/hosts /etc/hostname /etc/resolv.conf "
                        "/dev/shm; printf '#!/bin/sh\\nid\\n' > /etc/hosts && "
                        "chmod 6755 /etc/hosts && chown 0:0 /etc/hosts && "
                        "chown 1000:1000 /etc/hostname && echo x > /dev/shm/f && "
                        "chmod 6755 /dev/shm/f && echo done")
    assert code == 0, (out, err)
    assert out.split("\n") == ["0 0 644"] * 3 + ["0 0 1777", "done", ""], out
    d = pod_dir(env, pod)
    # /dev/shm is mounted in the daemon's mount namespace: seen through its root
    shm = f"/proc/{env.d.proc.pid}/root{d}/shm/f"
    for path, owner in ((f"{d}/hosts", HOST_ID), (f"{d}/hostname", HOST_ID + 1000),
                        (f"{d}/resolv.conf", HOST_ID), (shm, HOST_ID)):
        st = os.lstat(path)
        assert (st.st_uid, st.st_gid) == (owner, owner), (path, st)


def test_created_working_dir_is_the_pods_root(env):
    """A working directory missing from the image is made for the
    container: its root's in the pod's user namespace, which may write
    there (made as the host's root, it was nobody's inside)."""
    pod = userns_pod(env)
    cid = env.run(pod, "c", ["/bin/sleep", "100000"], working_dir="/made/here")
    code, out, err = sh(env, cid, "stat -c '%u %g' /made /made/here && touch /made/here/x && "
                        "echo ok")
    assert (code, out) == (0, "0 0\n0 0\nok\n"), (out, err)


def test_what_could_remount_is_refused(env, tmp_path):
    """A container's mounts are made inside the pod's user namespace, where
    the kernel does not lock their flags: with CAP_SYS_ADMIN there (which
    kubelet allows with hostUsers: false) `mount -o remount,bind,rw` made a
    read-only idmapped volume writable and changed the host's root's file.
    Until the mounts are made before the namespace is joined, what could
    remount (CAP_SYS_ADMIN, ALL, privileged) is refused; without it the
    volume holds."""
    pb = env.pb
    vol = tmp_path / "ro"
    vol.mkdir()
    (vol / "f").write_text("host\n")  # the host's root's, 0644
    idm = [pb.IDMapping(host_id=HOST_ID, container_id=0, length=LENGTH)]
    pod = userns_pod(env)
    mounts = [pb.Mount(container_path="/ro", host_path=str(vol), readonly=True,
                       uidMappings=idm, gidMappings=idm)]
    for name, sc in (
            ("CAP_SYS_ADMIN", pb.LinuxContainerSecurityContext(
                capabilities=pb.Capability(add_capabilities=["CAP_SYS_ADMIN"]))),
            ("CAP_SYS_ADMIN", pb.LinuxContainerSecurityContext(
                capabilities=pb.Capability(add_capabilities=["sys_admin"]))),
            ("ALL", pb.LinuxContainerSecurityContext(
                capabilities=pb.Capability(add_capabilities=["ALL"]))),
            ("privileged", pb.LinuxContainerSecurityContext(privileged=True))):
        with pytest.raises(grpc.RpcError) as e:
            env.create(pod, None, env.config(
                "c", command=["/bin/sleep", "100000"],
                linux=pb.LinuxContainerConfig(security_context=sc), mounts=mounts))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
        assert name in e.value.details() and "user namespace" in e.value.details()
    cid = env.create(pod, None, env.config("c", command=["/bin/sleep", "100000"],
                                           mounts=mounts))
    env.start(cid)
    assert sh(env, cid, "cat /ro/f") == (0, "host\n", "")
    code, _, err = sh(env, cid, "mount -o remount,bind,rw /ro")
    assert code != 0 and "ermission denied" in err, (code, err)
    code, _, err = sh(env, cid, "echo written >> /ro/f")
    assert code != 0 and "Read-only file system" in err, (code, err)
    assert sh(env, cid, "cat /ro/f") == (0, "host\n", "")
    assert (vol / "f").read_text() == "host\n"
