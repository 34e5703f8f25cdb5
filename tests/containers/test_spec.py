"""What a ContainerConfig asks for, seen from inside the running container:
the user and groups, capabilities, seccomp, no_new_privs, read-only and
masked paths, privileged, mounts, devices, working directory, PID modes,
and what a host without CAP_SYS_RESOURCE cannot give."""
import json
import os
import subprocess
import uuid

import grpc
import pytest

from .conftest import wait_for

DEFAULT_CAPS = 0xa80425fb  # containerd's (Docker's) default set


def exec_sync(env, cid, cmd, timeout=0):
    return env.rs.ExecSync(env.pb.ExecSyncRequest(container_id=cid, cmd=cmd, timeout=timeout),
                           timeout=60)


def sh(env, cid, script):
    r = exec_sync(env, cid, ["/bin/sh", "-c", script])
    return r.exit_code, r.stdout.decode(), r.stderr.decode()


def init_status(env, cid):
    """/proc/1/status of the container's init (a PID namespace of its own),
    once it runs the container's program (StartContainer may answer while
    the executor is still between its last setup step and the execve)."""
    wait_for(lambda: "sleep" in sh(env, cid, "cat /proc/1/cmdline")[1],
             what="the container's program to run")
    code, out, err = sh(env, cid, "cat /proc/1/status")
    assert code == 0, err
    return dict(line.split(":\t", 1) for line in out.splitlines() if ":\t" in line)


def sleeper(env, pod, name, image="busybox", **kw):
    return env.run(pod, name, ["/bin/sleep", "100000"], image=image, **kw)


def sc(env, **kw):
    pb = env.pb
    return pb.LinuxContainerConfig(security_context=pb.LinuxContainerSecurityContext(**kw))


def test_user_and_groups_from_the_image(env):
    pb = env.pb
    pod = env.pod()
    cid = env.run(pod, "u", ["/bin/sleep", "100000"], image="entrypoint")
    code, out, _ = sh(env, cid, "id")
    assert out.strip() == "uid=1000(app) gid=1000(app) groups=1000(app),2000(extra)"
    st = env.status(cid).status
    assert (st.user.linux.uid, st.user.linux.gid) == (1000, 1000)
    assert list(st.user.linux.supplemental_groups) == [1000, 2000]
    # the image's working directory, created
    assert sh(env, cid, "pwd")[1].strip() == "/work/dir"
    # the image's StopSignal (SIGUSR1) is what StopContainer sends
    trap = env.run(pod, "trap", ["/bin/sh", "-c", "trap 'exit 7' USR1; sleep 1000 & wait"],
                   image="entrypoint")
    env.wait_procs(trap, 2)
    env.stop(trap, timeout=30)
    assert env.status(trap).status.exit_code == 7


def test_run_as_user_group_and_policies(env):
    pb = env.pb
    pod = env.pod()
    i64 = pb.Int64Value
    merge = sleeper(env, pod, "merge", linux=sc(env, run_as_user=i64(value=1000),
                                                run_as_group=i64(value=3000),
                                                supplemental_groups=[4000]))
    assert sh(env, merge, "id -u; id -g; id -G")[1].split() == ["1000", "3000", "3000", "2000",
                                                                 "4000"]
    strict = sleeper(env, pod, "strict", linux=sc(
        env, run_as_user=i64(value=1000), run_as_group=i64(value=3000),
        supplemental_groups=[4000], supplemental_groups_policy=pb.Strict))
    assert sh(env, strict, "id -G")[1].split() == ["3000", "4000"]
    st = env.status(strict).status
    assert list(st.user.linux.supplemental_groups) == [3000, 4000]
    named = sleeper(env, pod, "named", linux=sc(env, run_as_username="nobody"))
    assert sh(env, named, "id -u")[1].strip() == "65534"
    with pytest.raises(grpc.RpcError) as e:
        sleeper(env, pod, "ghost", linux=sc(env, run_as_username="ghost"))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "`ghost` is not in the image's /etc/passwd" in e.value.details()
    st = env.rs.Status(pb.StatusRequest(), timeout=10)
    assert st.features.supplemental_groups_policy


def test_run_as_group_needs_a_user(env):
    """run_as_group alone names no user: refused for a container and for a
    pod, as containerd and cri-tools' validation suite do; with a user (or
    a user name) it is fine."""
    pb = env.pb
    i64 = pb.Int64Value
    pod = env.pod()
    with pytest.raises(grpc.RpcError) as e:
        sleeper(env, pod, "group-only", linux=sc(env, run_as_group=i64(value=3000)))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "run_as_group 3000 is set without run_as_user" in e.value.details()
    named = sleeper(env, pod, "named", linux=sc(env, run_as_username="nobody",
                                                run_as_group=i64(value=3000)))
    assert sh(env, named, "id -u; id -g")[1].split() == ["65534", "3000"]

    def pod_sc(name, **kw):
        return env.rs.RunPodSandbox(pb.RunPodSandboxRequest(config=pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, namespace="default",
                                           uid=uuid.uuid4().hex),
            linux=pb.LinuxPodSandboxConfig(
                cgroup_parent=env.cgroup_parent,
                security_context=pb.LinuxSandboxSecurityContext(**kw)))),
            timeout=60).pod_sandbox_id
    with pytest.raises(grpc.RpcError) as e:
        pod_sc("group-only", run_as_group=i64(value=3000))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "linux.security_context.run_as_group 3000 is set without run_as_user" \
        in e.value.details()
    assert all(p.metadata.name != "group-only" for p in env.rs.ListPodSandbox(
        pb.ListPodSandboxRequest(), timeout=10).items)
    assert pod_sc("both", run_as_user=i64(value=1000), run_as_group=i64(value=3000))


def test_capabilities(env):
    pb = env.pb
    pod = env.pod()
    plain = sleeper(env, pod, "plain")
    s = init_status(env, plain)
    assert int(s["CapEff"], 16) == DEFAULT_CAPS
    assert int(s["CapBnd"], 16) == DEFAULT_CAPS
    some = sleeper(env, pod, "some", linux=sc(env, capabilities=pb.Capability(
        drop_capabilities=["ALL"], add_capabilities=["NET_ADMIN", "CAP_SYS_TIME"])))
    s = init_status(env, some)
    assert int(s["CapEff"], 16) == (1 << 12) | (1 << 25)
    with pytest.raises(grpc.RpcError) as e:
        sleeper(env, pod, "bad", linux=sc(env, capabilities=pb.Capability(
            add_capabilities=["CAP_FLY"])))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "CAP_FLY" in e.value.details()
    # ambient: a non-root process keeps NET_BIND_SERVICE
    amb = sleeper(env, pod, "amb", linux=sc(
        env, run_as_user=pb.Int64Value(value=1000),
        capabilities=pb.Capability(add_ambient_capabilities=["NET_BIND_SERVICE"])))
    s = init_status(env, amb)
    assert int(s["CapAmb"], 16) == 1 << 10
    assert int(s["CapEff"], 16) == 1 << 10


def userns_works(env, cid):
    """unshare -U needs no capability: only seccomp can refuse it."""
    return sh(env, cid, "unshare -U true")[0] == 0


def test_seccomp_runtime_default_and_unconfined(env):
    pb = env.pb
    if subprocess.run(["unshare", "-U", "true"]).returncode != 0:
        pytest.skip("this host refuses unprivileged user namespaces")
    pod = env.pod()
    unconfined = sleeper(env, pod, "unconfined")
    assert init_status(env, unconfined)["Seccomp"].strip() == "0"
    assert userns_works(env, unconfined)
    rd = sleeper(env, pod, "rd", linux=sc(env, seccomp=pb.SecurityProfile(
        profile_type=pb.SecurityProfile.RuntimeDefault)))
    assert init_status(env, rd)["Seccomp"].strip() == "2"
    code, _, err = sh(env, rd, "unshare -U true")
    assert code != 0 and "Operation not permitted" in err
    assert sh(env, rd, "echo ok; ls / >/dev/null")[:2] == (0, "ok\n")
    # privileged: unconfined whatever the profile
    priv = sleeper(env, pod, "priv", linux=sc(env, privileged=True, seccomp=pb.SecurityProfile(
        profile_type=pb.SecurityProfile.RuntimeDefault)))
    assert init_status(env, priv)["Seccomp"].strip() == "0"


def test_seccomp_localhost(env, tmp_path):
    pb = env.pb
    pod = env.pod()
    profile = tmp_path / "no-mkdir.json"
    profile.write_text(json.dumps({
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO",
                      "errnoRet": 13}]}))
    cid = sleeper(env, pod, "lh", linux=sc(env, seccomp=pb.SecurityProfile(
        profile_type=pb.SecurityProfile.Localhost, localhost_ref=str(profile))))
    code, _, err = sh(env, cid, "mkdir /tmp/x")
    assert code != 0 and "Permission denied" in err
    assert sh(env, cid, "touch /tmp/y")[0] == 0
    with pytest.raises(grpc.RpcError) as e:
        sleeper(env, pod, "missing", linux=sc(env, seccomp=pb.SecurityProfile(
            profile_type=pb.SecurityProfile.Localhost, localhost_ref=str(tmp_path / "nope"))))
    assert str(tmp_path / "nope") in e.value.details()
    profile.write_text("{not json")
    with pytest.raises(grpc.RpcError) as e:
        sleeper(env, pod, "broken", linux=sc(env, seccomp=pb.SecurityProfile(
            profile_type=pb.SecurityProfile.Localhost, localhost_ref=str(profile))))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_no_new_privs_readonly_rootfs_masked_paths(env):
    pod = env.pod()
    cid = sleeper(env, pod, "locked", linux=sc(env, no_new_privs=True, readonly_rootfs=True))
    assert init_status(env, cid)["NoNewPrivs"].strip() == "1"
    code, _, err = sh(env, cid, "touch /x")
    assert code != 0 and "Read-only file system" in err
    assert sh(env, cid, "touch /tmp/x")[0] != 0  # /tmp is the image's, read-only too
    assert sh(env, cid, "echo hi > /dev/shm/x")[0] == 0  # the pod's shm stays writable
    # masked: a default masked file reads as empty; /proc/sys is read-only
    masked = [p for p in ("/proc/kcore", "/proc/keys", "/proc/timer_list") if os.path.exists(p)]
    assert masked
    assert sh(env, cid, f"wc -c < {masked[0]}")[1].strip() == "0"
    assert sh(env, cid, "cat /proc/keys /proc/timer_list 2>/dev/null | wc -c")[1].strip() == "0"
    code, _, err = sh(env, cid, "echo x > /proc/sys/kernel/domainname")
    assert code != 0
    # the config's lists replace the defaults
    own = sleeper(env, pod, "own", linux=sc(env, masked_paths=["/proc/cmdline"],
                                            readonly_paths=["/proc/bus"]))
    assert sh(env, own, "wc -c < /proc/cmdline")[1].strip() == "0"


def test_privileged(env):
    pod = env.pod()
    cid = sleeper(env, pod, "priv", linux=sc(env, privileged=True))
    s = init_status(env, cid)
    assert int(s["CapEff"], 16) == int(s["CapBnd"], 16)
    assert int(s["CapEff"], 16) & (1 << 21)  # CAP_SYS_ADMIN
    # the host's devices, writable sysfs
    host_devs = {d for d in os.listdir("/dev") if os.path.exists("/dev/" + d) and
                 (os.stat("/dev/" + d).st_mode & 0o170000) in (0o020000, 0o060000)}
    seen = set(sh(env, cid, "ls /dev")[1].split())
    assert host_devs - {"console", "ptmx", "tty"} <= seen
    mounts = sh(env, cid, "cat /proc/mounts")[1]
    sys_line = [l for l in mounts.splitlines() if l.split()[1] == "/sys"][0]
    assert " rw," in sys_line
    plain = sleeper(env, pod, "plain")
    mounts = sh(env, plain, "cat /proc/mounts")[1]
    assert " ro," in [l for l in mounts.splitlines() if l.split()[1] == "/sys"][0]
    assert "kmsg" not in sh(env, plain, "ls /dev")[1].split()


def test_bind_mounts(env, tmp_path):
    pb = env.pb
    pod = env.pod()
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "f").write_text("from the host\n")
    rw = tmp_path / "rw"
    rw.mkdir()
    missing = tmp_path / "made" / "by" / "kinglet"
    cid = sleeper(env, pod, "m", mounts=[
        pb.Mount(container_path="/ro", host_path=str(ro), readonly=True),
        pb.Mount(container_path="/rw", host_path=str(rw)),
        pb.Mount(container_path="/made", host_path=str(missing))])
    assert sh(env, cid, "cat /ro/f")[1] == "from the host\n"
    code, _, err = sh(env, cid, "touch /ro/g")
    assert code != 0 and "Read-only file system" in err
    assert sh(env, cid, "echo hi > /rw/g")[0] == 0
    assert (rw / "g").read_text() == "hi\n"
    assert missing.is_dir()


def test_recursive_read_only(env, tmp_path):
    pb = env.pb
    st = env.rs.Status(pb.StatusRequest(), timeout=10)
    if not st.runtime_handlers[0].features.recursive_read_only_mounts:
        pytest.skip("the kernel lacks mount_setattr")
    top = tmp_path / "top"
    (top / "sub").mkdir(parents=True)
    # a mount below the bind's source, in the daemon's mount namespace
    env.d.run("mount", "-t", "tmpfs", "tmpfs", str(top / "sub"))
    try:
        pod = env.pod()
        plain = sleeper(env, pod, "ro", mounts=[
            pb.Mount(container_path="/top", host_path=str(top), readonly=True)])
        rro = sleeper(env, pod, "rro", mounts=[
            pb.Mount(container_path="/top", host_path=str(top), readonly=True,
                     recursive_read_only=True)])
        # A read-only rbind is read-only all the way down, rro or not: a
        # mount below a read-only volume must not stay writable (issue 16).
        for c in (plain, rro):
            code, _, err = sh(env, c, "touch /top/sub/y")
            assert code != 0 and "Read-only file system" in err, (c, err)
        with pytest.raises(grpc.RpcError) as e:
            sleeper(env, pod, "bad", mounts=[pb.Mount(container_path="/top", host_path=str(top),
                                                      recursive_read_only=True)])
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        for c in (plain, rro):
            env.stop(c)
            env.remove(c)
    finally:
        env.d.run("umount", "-l", str(top / "sub"), check=False)


@pytest.mark.parametrize("dest", ["/proc/sys/kernel", "/proc/1/oom_score_adj"])
def test_volume_inside_proc_is_refused(env, tmp_path, dest):
    """As runc since CVE-2019-19921: no volume inside /proc but the few files
    lxcfs emulates; refused before anything is made, naming the mount."""
    pb = env.pb
    pod = env.pod()
    with pytest.raises(grpc.RpcError) as e:
        sleeper(env, pod, "proc", mounts=[
            pb.Mount(container_path="/data", host_path=str(tmp_path)),
            pb.Mount(container_path=dest, host_path=str(tmp_path))])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "mounts[1]" in e.value.details() and dest in e.value.details()
    ok = tmp_path / "meminfo"
    ok.write_text("MemTotal: 42 kB\n")
    cid = sleeper(env, pod, "meminfo", mounts=[
        pb.Mount(container_path="/proc/meminfo", host_path=str(ok), readonly=True)])
    assert sh(env, cid, "cat /proc/meminfo")[1] == "MemTotal: 42 kB\n"


def test_devices(env):
    pb = env.pb
    pod = env.pod()
    cid = sleeper(env, pod, "dev", devices=[
        pb.Device(container_path="/dev/mynull", host_path="/dev/null", permissions="rw")])
    assert sh(env, cid, "echo x > /dev/mynull && echo ok")[1] == "ok\n"
    assert sh(env, cid, "ls -l /dev/mynull")[1].startswith("c")
    with pytest.raises(grpc.RpcError) as e:
        sleeper(env, pod, "nodev", devices=[
            pb.Device(container_path="/dev/x", host_path="/nonexistent/dev", permissions="rw")])
    assert "/nonexistent/dev" in e.value.details()


def test_working_dir_and_env(env):
    pb = env.pb
    pod = env.pod()
    cid = sleeper(env, pod, "wd", image="entrypoint", working_dir="/new/deep/dir",
                  envs=[pb.KeyValue(key="OVERRIDE", value=b"config"),
                        pb.KeyValue(key="EXTRA", value=b"a=b")])
    assert sh(env, cid, "pwd")[1].strip() == "/new/deep/dir"
    env_out = sh(env, cid, "env")[1].splitlines()
    assert "OVERRIDE=config" in env_out and "OVERRIDE=image" not in env_out
    assert "FROM_IMAGE=1" in env_out and "EXTRA=a=b" in env_out


def test_pid_modes(env):
    pb = env.pb
    shared = env.pod("shared", pid=pb.POD)
    a = sleeper(env, shared, "a")
    b = env.run(shared, "b", ["/bin/sleep", "200000"])
    # one PID namespace for the pod: b sees a's sleep
    assert "100000" in sh(env, b, "ps -o args")[1]
    own = env.pod("own")
    c = sleeper(env, own, "c")
    target = env.run(own, "t", ["/bin/sleep", "300000"], linux=sc(
        env, namespace_options=pb.NamespaceOption(pid=pb.TARGET, target_id=c)))
    assert "100000" in sh(env, target, "ps -o args")[1]
    assert "300000" in sh(env, c, "ps -o args")[1]  # one namespace, both ways
    with pytest.raises(grpc.RpcError) as e:
        env.run(own, "t2", ["/bin/true"], linux=sc(
            env, namespace_options=pb.NamespaceOption(pid=pb.TARGET, target_id="nope")))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as e:
        env.run(own, "t3", ["/bin/true"], linux=sc(
            env, namespace_options=pb.NamespaceOption(pid=9)))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def daemon_has_cap(env, cap):
    caps = int([l for l in open(f"/proc/{env.d.proc.pid}/status")
                if l.startswith("CapEff")][0].split()[1], 16)
    return bool(caps & (1 << cap))


def test_what_the_host_cannot_give_is_logged_not_reported(env):
    """What the host cannot give is the daemon's warning, logged once with
    the container's id; the status message stays empty, since kubelet
    prepends it to the container's termination message."""
    pb = env.pb
    pod = env.pod()
    cid = sleeper(env, pod, "oom", linux=pb.LinuxContainerConfig(
        resources=pb.LinuxContainerResources(oom_score_adj=-999)))
    assert env.status(cid).status.message == ""
    log = env.d.logtext()
    own = int(open(f"/proc/{env.d.proc.pid}/oom_score_adj").read())
    seen = int(sh(env, cid, "cat /proc/1/oom_score_adj")[1])
    if not daemon_has_cap(env, 24):  # no CAP_SYS_RESOURCE: clamped, with a warning
        assert seen == own
        assert log.count(f"container `{cid}`: ") == 1
        assert "oom_score_adj -999 raised" in log
    else:
        assert seen == -999


def test_guaranteed_pod_termination_message_is_the_apps_own(env, tmp_path):
    """A Guaranteed pod's container asks for oom_score_adj -997, which a
    host without CAP_SYS_RESOURCE forbids: the clamp is the daemon's
    warning, in its log, never in ContainerStatus.message (kubelet puts
    that message in front of terminationMessagePath's contents)."""
    if daemon_has_cap(env, 24):
        pytest.skip("the daemon has CAP_SYS_RESOURCE: oom_score_adj -997 is not clamped")
    pb = env.pb
    pod = env.pod("guaranteed")
    term = tmp_path / "termination-log"  # kubelet's per-container file
    term.write_text("")
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    os.mkfifo(ctl / "go")
    res = pb.LinuxContainerResources(cpu_period=100000, cpu_quota=50000, cpu_shares=512,
                                     memory_limit_in_bytes=64 << 20, oom_score_adj=-997)
    cid = env.run(pod, "app", ["/bin/sh", "-c",
                               "echo -n 'the app says goodbye' > /dev/termination-log; "
                               "read line < /ctl/go; exit 2"],
                  linux=pb.LinuxContainerConfig(resources=res),
                  mounts=[pb.Mount(container_path="/dev/termination-log", host_path=str(term)),
                          pb.Mount(container_path="/ctl", host_path=str(ctl))])
    st = env.status(cid).status
    assert st.state == pb.CONTAINER_RUNNING
    assert st.message == ""
    # the container's own reading, once its program runs
    wait_for(lambda: term.read_text() == "the app says goodbye", what="the termination message")
    assert int(sh(env, cid, "cat /proc/1/oom_score_adj")[1]) == int(
        open(f"/proc/{env.d.proc.pid}/oom_score_adj").read())
    fd = os.open(ctl / "go", os.O_WRONLY)
    os.write(fd, b"go\n")
    os.close(fd)
    st = env.wait_exited(cid)
    assert (st.exit_code, st.reason, st.message) == (2, "Error", "")
    assert term.read_text() == "the app says goodbye"
    warning = f"container `{cid}`: oom_score_adj -997 raised to"
    assert env.d.logtext().count(warning) == 1
    # and so after a restart of the daemon, which reads the record back
    env.kill9_restart()
    st = env.status(cid).status
    assert (st.exit_code, st.message) == (2, "")


def test_a_warning_an_older_daemon_stored_is_dropped(env):
    """Records written by a kinglet that kept its warnings in the status
    message: read back, a container that has not exited has none, and its
    exit brings none."""
    pb = env.pb
    pod = env.pod()
    cid = sleeper(env, pod, "old")
    env.kill9()
    rec = os.path.join(env.d.root, "containers", cid + ".json")
    with open(rec) as f:
        r = json.load(f)
    r["message"] = "oom_score_adj -997 raised to 0: the host forbids lower values"
    with open(rec, "w") as f:
        json.dump(r, f)
    env.restart()
    assert env.status(cid).status.message == ""
    env.stop(cid)
    st = env.wait_exited(cid)
    assert (st.reason, st.message) == ("Error", "")


def test_host_ipc_shares_the_hosts_dev_shm(env):
    """A pod in the host's IPC namespace has no /dev/shm of its own: its
    containers get the host's, both ways (containerd binds it too)."""
    pb = env.pb
    ns = list(env.d.prefix)  # the daemon's mount namespace is "the host"
    name = "kinglet-test-" + uuid.uuid4().hex
    pod = env.pod("hostipc", ipc=pb.NODE)
    try:
        cid = sleeper(env, pod, "c")
        subprocess.run(ns + ["sh", "-c", f"echo from-host > /dev/shm/{name}"], check=True)
        assert sh(env, cid, f"cat /dev/shm/{name}") == (0, "from-host\n", "")
        assert sh(env, cid, f"echo from-ctr > /dev/shm/{name}.c")[0] == 0
        out = subprocess.run(ns + ["cat", f"/dev/shm/{name}.c"], capture_output=True, text=True)
        assert out.stdout == "from-ctr\n", out.stderr
        host_ipc = os.readlink("/proc/self/ns/ipc")
        assert sh(env, cid, "readlink /proc/1/ns/ipc")[1].strip() == host_ipc
    finally:
        subprocess.run(ns + ["rm", "-f", f"/dev/shm/{name}", f"/dev/shm/{name}.c"])


def test_env_values_that_are_not_utf8(env):
    """KeyValue.value is bytes upstream (cri-api v0.36.3): such a value
    reaches the container (each bad byte as U+FFFD, as the JSON spec
    forces), and one holding a NUL is refused."""
    pb = env.pb
    pod = env.pod()

    def create(name, value):
        cfg = env.config(name, command=["/bin/sleep", "100000"],
                         envs=[pb.KeyValue(key="ODD", value=value)])
        return env.create(pod, None, cfg)

    cid = create("odd", b"a\xff\xfez")
    env.start(cid)
    out = sh(env, cid, "printf %s \"$ODD\" | od -An -tx1")[1].split()
    assert out == ["61", "ef", "bf", "bd", "ef", "bf", "bd", "7a"]
    with pytest.raises(grpc.RpcError) as e:
        create("nul", b"a\x00bc")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "NUL" in e.value.details()


def test_mount_propagation(env, tmp_path):
    """Bidirectional: a mount the container makes under the volume appears on
    the host (the host directory is on a shared mount, as kubelet requires),
    and one the host makes appears in the container; host-to-container
    (rslave): only the host's reach the container; private: neither."""
    pb = env.pb
    ns = list(env.d.prefix)  # the daemon's mount namespace is "the host"
    d = tmp_path / "shared"
    d.mkdir()
    subprocess.run(ns + ["sh", "-c", f"mount -t tmpfs kinglet-prop {d} && mount --make-shared {d}"
                         f" && mkdir {d}/bi {d}/slave {d}/priv {d}/fromhost"], check=True)
    try:
        pod = env.pod()
        kinds = {"bi": pb.PROPAGATION_BIDIRECTIONAL, "slave": pb.PROPAGATION_HOST_TO_CONTAINER,
                 "priv": pb.PROPAGATION_PRIVATE}
        cids = {}
        for name, prop in kinds.items():
            cids[name] = sleeper(env, pod, name, linux=sc(env, privileged=True), mounts=[
                pb.Mount(container_path="/v", host_path=str(d), propagation=prop)])
            # the container mounts under the volume
            code, _, err = sh(env, cids[name], f"mount -t tmpfs from-{name} /v/{name} && "
                                               f"touch /v/{name}/made-inside")
            assert code == 0, err
        # the host mounts under it, after the containers started
        subprocess.run(ns + ["mount", "-t", "tmpfs", "from-host", f"{d}/fromhost"], check=True)
        subprocess.run(ns + ["touch", f"{d}/fromhost/made-on-host"], check=True)

        def host_sees(name):
            return subprocess.run(ns + ["test", "-e", f"{d}/{name}/made-inside"]).returncode == 0
        wait_for(lambda: host_sees("bi"), what="the container's mount on the host")
        assert not host_sees("slave") and not host_sees("priv")
        for name, seen in (("bi", True), ("slave", True), ("priv", False)):
            code = sh(env, cids[name], "test -e /v/fromhost/made-on-host")[0]
            assert (code == 0) == seen, (name, code)
        # the rootfs and what was mounted in it stayed the container's own
        mounts = subprocess.run(ns + ["cat", "/proc/self/mountinfo"], capture_output=True,
                                text=True).stdout
        assert "from-slave" not in mounts and "from-priv" not in mounts
        assert mounts.count("from-bi") >= 1
        for cid in cids.values():
            env.stop(cid)
            env.remove(cid)
    finally:
        subprocess.run(ns + ["umount", "-R", "-l", str(d)])


@pytest.mark.parametrize("nnp", [True, False])
def test_an_exec_gets_what_the_init_got(env, nnp):
    """The exec'd command is set up by kinglet-enter from a recipe, the
    init by the executor from the spec, in the same order: the same
    settings must give the same credentials, capability sets, no_new_privs
    and seccomp filter, with a user, groups, capabilities and a filter.
    Without no_new_privs the filter is loaded before the ids change, and
    kinglet-enter then clones the command under it (the runtime default
    refuses clone3)."""
    pb = env.pb
    pod = env.pod()
    cid = sleeper(env, pod, "same", linux=sc(
        env, run_as_user=pb.Int64Value(value=1000), run_as_group=pb.Int64Value(value=2000),
        supplemental_groups=[3000, 4000], no_new_privs=nnp,
        capabilities=pb.Capability(drop_capabilities=["CHOWN"],
                                   add_capabilities=["NET_ADMIN"],
                                   add_ambient_capabilities=["NET_BIND_SERVICE"]),
        seccomp=pb.SecurityProfile(profile_type=pb.SecurityProfile.RuntimeDefault)))
    init = init_status(env, cid)
    code, out, err = sh(env, cid, "cat /proc/self/status")
    assert code == 0, err
    mine = dict(line.split(":\t", 1) for line in out.splitlines() if ":\t" in line)
    keys = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
            "NoNewPrivs", "Seccomp", "Seccomp_filters")
    assert {k: mine[k] for k in keys} == {k: init[k] for k in keys}
    assert init["Uid"].split()[0] == "1000" and init["Seccomp"] == "2"
    assert int(init["CapAmb"], 16) == 1 << 10  # NET_BIND_SERVICE
