"""The pod init (pid 1 of a pod with a shared PID namespace) holds what a
pause process holds, and less: every container of the pod sees it.

Through CRI: RunPodSandbox with NamespaceOption.pid = POD, then the init as
the kernel shows it under /proc: its root, cwd and executable, its
credentials, capability sets, no_new_privs and seccomp mode, its fds, its
cgroup and its memory; and that it still reaps the orphans of the namespace
under its seccomp filter.
"""
import errno
import fcntl
import os
import re

import pytest

from .conftest import wait_for
from .test_sandbox import (CIDR, _comm, _in_cgroup, cgroup_parent, info, pod_config,  # noqa: F401
                           runtime, stop_remove)


@pytest.fixture
def pd(pod_daemon_factory):
    d = pod_daemon_factory(["--pod-cidr", CIDR])
    yield d
    rc = d.stop()
    assert rc == 0, f"daemon exited with {rc}:\n{d.logtext()}"


@pytest.fixture
def pod(cri, pd, cgroup_parent):  # noqa: F811
    rs = runtime(cri, pd)
    parent, cgdir = cgroup_parent
    cfg = pod_config(cri, "shared", parent, pid=cri.pb.POD)
    pid = rs.RunPodSandbox(cri.pb.RunPodSandboxRequest(config=cfg), timeout=30).pod_sandbox_id
    inf = info(cri, rs, pid)
    yield inf, pid, (parent, cgdir)
    stop_remove(cri, rs, pid)


def proc_status(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def test_pod_init_sees_no_host_filesystem(pod, pd):
    inf, _, _ = pod
    init = inf["pid"]
    # Its root is an empty tmpfs of its own mount namespace; `..` from
    # there stays there (the host's root was detached, not hidden).
    assert os.listdir(f"/proc/{init}/root") == []
    assert os.listdir(f"/proc/{init}/root/..") == []
    assert os.listdir(f"/proc/{init}/cwd") == []
    assert os.readlink(f"/proc/{init}/ns/mnt") != os.readlink(f"/proc/{pd.pid}/ns/mnt")
    with open(f"/proc/{init}/mountinfo") as f:
        mounts = f.read().splitlines()
    assert len(mounts) == 1 and " / / ro," in mounts[0], mounts
    # No fd at all: stdio was the host's /dev/null.
    assert os.listdir(f"/proc/{init}/fd") == []


def test_pod_init_binary_cannot_be_written(cri, pd, pod):
    """The CVE-2019-5736 sequence: /proc/PID/exe opened with O_PATH while
    the init runs, reopened for writing once nothing runs it any more (the
    pod stopped). The seals refuse the write (EPERM); ETXTBSY, which any
    running binary gives, would prove nothing."""
    inf, pid, _ = pod
    init = inf["pid"]
    exe = f"/proc/{init}/exe"
    assert os.readlink(exe).startswith("/memfd:kinglet-pod-init"), os.readlink(exe)
    fd = os.open(exe, os.O_PATH)
    try:
        rfd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
        try:
            seals = fcntl.fcntl(rfd, fcntl.F_GET_SEALS)
            want = (fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
                    | fcntl.F_SEAL_WRITE)
            assert seals & want == want, hex(seals)
        finally:
            os.close(rfd)
        rs = runtime(cri, pd)
        rs.StopPodSandbox(cri.pb.StopPodSandboxRequest(pod_sandbox_id=pid), timeout=60)
        wait_for(lambda: not os.path.exists(f"/proc/{init}"), what="the pod init to end")
        with pytest.raises(OSError) as e:
            w = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)
            try:
                os.write(w, b"PWNED!")
            finally:
                os.close(w)
        assert e.value.errno == errno.EPERM, e.value
        with pytest.raises(OSError) as e:
            os.truncate(f"/proc/self/fd/{fd}", 0)
        assert e.value.errno == errno.EPERM, e.value
    finally:
        os.close(fd)


def test_pod_init_has_no_privilege(pod):
    inf, _, _ = pod
    st = proc_status(inf["pid"])
    for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(st[k], 16) == 0, f"{k} {st[k]}"
    assert st["NoNewPrivs"] == "1"
    assert st["Seccomp"] == "2"
    assert st["Seccomp_filters"] == "1"
    assert st["Uid"].split() == ["65535"] * 4
    assert st["Gid"].split() == ["65535"] * 4
    assert st["Groups"].strip() == ""
    assert re.search(r"NSpid:\s+\d+\s+1$", "NSpid:\t" + st["NSpid"])


def test_pod_init_is_in_the_pod_cgroup_and_small(pod):
    inf, pid, (parent, cgdir) = pod
    init = inf["pid"]
    # What test_sandbox's leak check looks for.
    assert _comm(str(init)) == "pod-init" and _in_cgroup(str(init), parent)
    procs = open(os.path.join(cgdir, pid, "cgroup.procs")).read().split()
    assert str(init) in procs
    with open(f"/proc/{init}/cgroup") as f:
        assert any(line.startswith("0::") and line.rstrip().endswith("/" + pid) for line in f)
    rss = int(proc_status(init)["VmRSS"].split()[0])
    print(f"pod init VmRSS {rss} kB")
    assert rss < 512, f"pod init VmRSS {rss} kB"


def test_pod_init_reaps_orphans(pod, pd):
    inf, _, _ = pod
    init = inf["pid"]
    # An orphan in the pod's PID namespace: the shell exits at once, its
    # child is reparented to the init, which must reap it when it exits.
    pd.run("nsenter", "--pid=" + inf["pidNamespace"], "--", "sh", "-c",
           "sleep 1 >/dev/null 2>&1 & echo started")
    children = f"/proc/{init}/task/{init}/children"
    wait_for(lambda: open(children).read().split() != [], timeout=60,
             what="the orphan reparented to the pod init")
    wait_for(lambda: open(children).read().split() == [], timeout=60,
             what="the pod init to reap the orphan")
    assert proc_status(init)["State"].startswith("S")
