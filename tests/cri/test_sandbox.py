"""Pod sandboxes through the real gRPC client: namespaces, files, networking,
persistence. Every daemon here runs in a network + mount namespace of its
own (PodDaemon), so nothing touches the machine's network."""
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import uuid

import grpc
import pytest

from conftest import channel, wait_for

CIDR = "10.77.0.0/24"


def runtime(cri, d):
    return cri.grpc.RuntimeServiceStub(channel(d))


@pytest.fixture
def cgroup_parent():
    """A cgroup parent of the test's own, removed afterwards."""
    root = "/sys/fs/cgroup/unified"
    if not os.path.exists(root + "/cgroup.procs"):
        root = "/sys/fs/cgroup"
    name = "kinglet-test-" + uuid.uuid4().hex[:8]
    yield "/" + name, os.path.join(root, name)
    path = os.path.join(root, name)
    if os.path.isdir(path):
        for sub in sorted((os.path.join(dp, x) for dp, dns, _ in os.walk(path) for x in dns),
                          key=len, reverse=True):
            os.rmdir(sub)
        os.rmdir(path)


def pod_config(cri, name="p", cgroup_parent="", net=None, pid=None, ipc=None, **kw):
    pb = cri.pb
    ns = pb.NamespaceOption(network=net if net is not None else pb.POD,
                            pid=pid if pid is not None else pb.CONTAINER,
                            ipc=ipc if ipc is not None else pb.POD)
    uid = kw.pop("uid", uuid.uuid4().hex)
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, namespace="default", uid=uid, attempt=0),
        hostname=kw.pop("hostname", name),
        linux=pb.LinuxPodSandboxConfig(
            cgroup_parent=cgroup_parent,
            security_context=pb.LinuxSandboxSecurityContext(namespace_options=ns),
            sysctls=kw.pop("sysctls", {})),
        **kw)


def status(cri, rs, pid, verbose=False):
    return rs.PodSandboxStatus(cri.pb.PodSandboxStatusRequest(pod_sandbox_id=pid,
                                                              verbose=verbose), timeout=10)


def info(cri, rs, pid):
    return json.loads(status(cri, rs, pid, verbose=True).info["info"])


@pytest.fixture
def pd(pod_daemon_factory):
    d = pod_daemon_factory(["--pod-cidr", CIDR])
    yield d
    rc = d.stop()
    assert rc == 0, f"daemon exited with {rc}:\n{d.logtext()}"


def alive(pid):
    """Whether pid runs (a zombie waiting for the machine's init does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def mounts(d):
    return d.run("cat", "/proc/self/mountinfo").stdout


def test_lifecycle_pod_network(cri, pd, cgroup_parent):
    rs = runtime(cri, pd)
    parent, cgdir = cgroup_parent
    cfg = pod_config(cri, "web", parent, labels={"app": "web"}, annotations={"a": "1"},
                     pid=cri.pb.POD)
    pid = rs.RunPodSandbox(cri.pb.RunPodSandboxRequest(config=cfg), timeout=30).pod_sandbox_id
    assert re.fullmatch("[0-9a-f]{64}", pid)
    st = status(cri, rs, pid).status
    assert st.state == cri.pb.SANDBOX_READY
    assert st.metadata.name == "web" and st.labels == {"app": "web"}
    assert st.annotations == {"a": "1"}
    assert st.created_at > 0
    assert st.network.ip.startswith("10.77.0.")
    assert st.linux.namespaces.options.pid == cri.pb.POD
    inf = info(cri, rs, pid)
    netns = inf["netns"]
    assert inf["pid"] > 0
    # the pod's own network: eth0 with its address, the hostname in its UTS ns
    out = pd.run("ip", "-4", "-o", "addr", "show", "eth0", net=netns).stdout
    assert st.network.ip in out
    uts = inf["utsNamespace"]
    h = pd.run("nsenter", "--uts=" + uts, "hostname").stdout.strip()
    assert h == "web"
    # the init is pid 1 of the pod's PID namespace
    ns_of_init = os.readlink(f"/proc/{inf['pid']}/ns/pid")
    assert ns_of_init != os.readlink("/proc/self/ns/pid")
    with open(f"/proc/{inf['pid']}/status") as f:
        assert re.search(r"NSpid:\s+\d+\s+1\b", f.read())
    # files and /dev/shm
    m = mounts(pd)
    assert inf["shmPath"] in m and netns in m
    assert open(inf["hostnamePath"]).read() == "web\n" if os.path.exists(inf["hostnamePath"]) \
        else pd.run("cat", inf["hostnamePath"]).stdout == "web\n"
    # the pod cgroup, with the init in it
    procs = open(os.path.join(cgdir, pid, "cgroup.procs")).read().split()
    assert str(inf["pid"]) in procs
    # listed, filterable
    items = rs.ListPodSandbox(cri.pb.ListPodSandboxRequest(), timeout=10).items
    assert [i.id for i in items] == [pid]
    f = cri.pb.PodSandboxFilter(id=pid[:8])
    assert [i.id for i in rs.ListPodSandbox(cri.pb.ListPodSandboxRequest(filter=f)).items] == [pid]
    f = cri.pb.PodSandboxFilter(label_selector={"app": "other"})
    assert not rs.ListPodSandbox(cri.pb.ListPodSandboxRequest(filter=f)).items
    f = cri.pb.PodSandboxFilter(state=cri.pb.PodSandboxStateValue(state=cri.pb.SANDBOX_NOTREADY))
    assert not rs.ListPodSandbox(cri.pb.ListPodSandboxRequest(filter=f)).items

    rs.StopPodSandbox(cri.pb.StopPodSandboxRequest(pod_sandbox_id=pid), timeout=30)
    st = status(cri, rs, pid).status
    assert st.state == cri.pb.SANDBOX_NOTREADY
    assert not alive(inf["pid"])
    assert netns not in mounts(pd)
    assert "kl" not in pd.run("ip", "-o", "link").stdout
    # idempotent
    rs.StopPodSandbox(cri.pb.StopPodSandboxRequest(pod_sandbox_id=pid), timeout=30)
    rs.RemovePodSandbox(cri.pb.RemovePodSandboxRequest(pod_sandbox_id=pid), timeout=30)
    rs.RemovePodSandbox(cri.pb.RemovePodSandboxRequest(pod_sandbox_id=pid), timeout=30)
    rs.StopPodSandbox(cri.pb.StopPodSandboxRequest(pod_sandbox_id=pid), timeout=30)
    with pytest.raises(grpc.RpcError) as e:
        status(cri, rs, pid)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert not rs.ListPodSandbox(cri.pb.ListPodSandboxRequest(), timeout=10).items
    assert not os.path.exists(os.path.join(cgdir, pid))
    assert not os.path.exists(os.path.join(pd.state, "pods", pid))
    assert not os.path.exists(os.path.join(pd.root, "pods", pid + ".json"))
