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

from .conftest import channel, wait_for

CIDR = "10.77.0.0/24"


def runtime(cri, d):
    return cri.grpc.RuntimeServiceStub(channel(d))


@pytest.fixture
def cgroup_parent():
    """A cgroup parent of the test's own, removed afterwards."""
    root = "/sys/fs/cgroup/unified"
    if not os.path.exists(root + "/cgroup.procs"):
        root = "/sys/fs/cgroup"
    name = os.environ["KINGLET_TEST_CGROUP"] + "/kinglet-test-" + uuid.uuid4().hex[:8]
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


def leases(d):
    ipam = os.path.join(d.root, "net", "ipam")
    return [f for _, _, fs in os.walk(ipam) for f in fs if not f.startswith(".")]


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
    f = cri.pb.PodSandboxFilter(label_selector={"app": "web"},
                                state=cri.pb.PodSandboxStateValue(state=cri.pb.SANDBOX_READY))
    items = rs.ListPodSandbox(cri.pb.ListPodSandboxRequest(filter=f)).items
    assert [i.id for i in items] == [pid]
    assert items[0].labels == {"app": "web"} and items[0].annotations == {"a": "1"}
    assert items[0].metadata.name == "web" and items[0].created_at == st.created_at
    f = cri.pb.PodSandboxFilter(state=cri.pb.PodSandboxStateValue(state=cri.pb.SANDBOX_NOTREADY))
    assert not rs.ListPodSandbox(cri.pb.ListPodSandboxRequest(filter=f)).items

    rs.StopPodSandbox(cri.pb.StopPodSandboxRequest(pod_sandbox_id=pid), timeout=30)
    st = status(cri, rs, pid).status
    assert st.state == cri.pb.SANDBOX_NOTREADY
    assert not alive(inf["pid"])
    assert netns not in mounts(pd)
    # the veth and the lease go in the background, within moments
    wait_for(lambda: ": kl" not in pd.run("ip", "-o", "link").stdout, 10, what="veth removal")
    wait_for(lambda: not leases(pd), 10, what="lease release")
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


def run_pod(cri, rs, cfg, handler=""):
    return rs.RunPodSandbox(cri.pb.RunPodSandboxRequest(config=cfg, runtime_handler=handler),
                            timeout=60).pod_sandbox_id


def stop_remove(cri, rs, pid):
    rs.StopPodSandbox(cri.pb.StopPodSandboxRequest(pod_sandbox_id=pid), timeout=60)
    rs.RemovePodSandbox(cri.pb.RemovePodSandboxRequest(pod_sandbox_id=pid), timeout=60)


def ns_inode(path_or_link):
    return os.stat(path_or_link).st_ino


# (pid TARGET is refused for pods: test_hardening.py)
@pytest.mark.parametrize("mode", ["host-network", "host-ipc", "pid-node", "pid-container"])
def test_namespace_modes(cri, pd, cgroup_parent, mode):
    pb = cri.pb
    rs = runtime(cri, pd)
    kw = {}
    if mode == "host-network":
        kw = dict(net=pb.NODE, hostname="")
    elif mode == "host-ipc":
        kw = dict(ipc=pb.NODE)
    else:
        kw = dict(pid={"pid-node": pb.NODE, "pid-container": pb.CONTAINER}[mode])
    pid = run_pod(cri, rs, pod_config(cri, "m", cgroup_parent[0], **kw))
    st = status(cri, rs, pid).status
    inf = info(cri, rs, pid)
    m = mounts(pd)
    assert st.state == pb.SANDBOX_READY
    assert inf["pid"] == 0  # no shared PID namespace: no init
    if mode == "host-network":
        assert st.network.ip == ""
        assert inf["netns"] == ""
        assert "/ns/net" not in m and "/ns/uts" not in m
        # the node's hosts file and host name
        assert pd.run("cat", inf["hostnamePath"]).stdout.strip() == socket.gethostname()
    else:
        assert st.network.ip.startswith("10.77.0.")
        assert inf["netns"] in m
    if mode == "host-ipc":
        assert inf["shmPath"] not in m and inf["ipcNamespace"] not in m
    else:
        assert inf["shmPath"] in m and inf["ipcNamespace"] in m
        df = pd.run("df", "-k", inf["shmPath"]).stdout
        assert "65536" in df, df
    assert st.linux.namespaces.options.pid == kw.get("pid", pb.CONTAINER)
    stop_remove(cri, rs, pid)
    assert f"/pods/{pid}" not in mounts(pd)
    assert not os.path.exists(os.path.join(pd.state, "pods", pid))


def test_pods_reach_each_other_and_the_node(cri, pd, cgroup_parent):
    rs = runtime(cri, pd)
    a = run_pod(cri, rs, pod_config(cri, "a", cgroup_parent[0]))
    b = run_pod(cri, rs, pod_config(cri, "b", cgroup_parent[0]))
    ipa, ipb = (status(cri, rs, p).status.network.ip for p in (a, b))
    assert ipa != ipb
    nsa = info(cri, rs, a)["netns"]
    r = pd.run("busybox", "ping", "-c", "1", "-W", "5", ipb, net=nsa, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    # the node: the bridge's gateway address
    r = pd.run("busybox", "ping", "-c", "1", "-W", "5", "10.77.0.1", net=nsa, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    for p in (a, b):
        stop_remove(cri, rs, p)


SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(4); print("listening", flush=True)
while True:
    c, _ = s.accept(); c.sendall(b"hello from the pod\\n"); c.close()
"""

CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
print(c.recv(100).decode().strip())
"""


def test_host_port_from_outside(cri, pd, cgroup_parent):
    pb = cri.pb
    rs = runtime(cri, pd)
    cfg = pod_config(cri, "hp", cgroup_parent[0],
                     port_mappings=[pb.PortMapping(protocol=pb.TCP, container_port=80,
                                                   host_port=8080)])
    pid = run_pod(cri, rs, cfg)
    netns = info(cri, rs, pid)["netns"]
    server = subprocess.Popen(
        ["nsenter", "-t", str(pd.holder.pid), "--mount", "--net", "--", "nsenter",
         "--net=" + netns, "--", "/usr/bin/python3", "-c", SERVER, "80"],
        stdout=subprocess.PIPE, text=True)
    # an "outside" machine: a netns of the test's, wired to the node by a veth
    outside = subprocess.Popen(["unshare", "--net", "--", "sh", "-c",
                                "ip link set lo up && echo ready && exec cat"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert server.stdout.readline().strip() == "listening"
        assert outside.stdout.readline().strip() == b"ready"
        pd.run("ip", "link", "add", "kt-out", "type", "veth", "peer", "name", "eth1", "netns",
               str(outside.pid))
        pd.run("ip", "addr", "add", "192.168.77.1/24", "dev", "kt-out")
        pd.run("ip", "link", "set", "kt-out", "up")
        o = ["nsenter", "-t", str(outside.pid), "--net", "--"]
        subprocess.run(o + ["ip", "addr", "add", "192.168.77.2/24", "dev", "eth1"], check=True)
        subprocess.run(o + ["ip", "link", "set", "eth1", "up"], check=True)
        r = subprocess.run(o + ["/usr/bin/python3", "-c", CLIENT, "192.168.77.1", "8080"],
                           capture_output=True, text=True, timeout=30)
        assert r.stdout.strip() == "hello from the pod", r.stderr
        # and from the node itself, through localhost
        r = pd.run("/usr/bin/python3", "-c", CLIENT, "127.0.0.1", "8080", check=False)
        assert r.stdout.strip() == "hello from the pod", r.stderr
        stop_remove(cri, rs, pid)
        assert "kinglet:" not in pd.run("nft", "list", "table", "inet", "kinglet").stdout
        r = subprocess.run(o + ["/usr/bin/python3", "-c", CLIENT, "192.168.77.1", "8080"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0
    finally:
        server.kill()
        server.wait()
        outside.stdin.close()
        outside.wait()


def test_dns_and_hostname_files(cri, pd, cgroup_parent):
    pb = cri.pb
    rs = runtime(cri, pd)
    dns = pb.DNSConfig(servers=["10.96.0.10", "fd00::10"],
                       searches=["default.svc.cluster.local", "svc.cluster.local"],
                       options=["ndots:5", "edns0"])
    pid = run_pod(cri, rs, pod_config(cri, "dns", cgroup_parent[0], dns_config=dns))
    inf = info(cri, rs, pid)
    resolv = open(inf["resolvPath"]).read()
    assert resolv == ("nameserver 10.96.0.10\nnameserver fd00::10\n"
                      "search default.svc.cluster.local svc.cluster.local\n"
                      "options ndots:5 edns0\n")
    hosts = open(inf["hostsPath"]).read()
    ip = status(cri, rs, pid).status.network.ip
    assert "127.0.0.1\tlocalhost" in hosts and f"{ip}\tdns" in hosts
    # without a DNSConfig: the host's resolv.conf
    pid2 = run_pod(cri, rs, pod_config(cri, "dns2", cgroup_parent[0]))
    with open("/etc/resolv.conf") as f:
        assert open(info(cri, rs, pid2)["resolvPath"]).read() == f.read()
    # hostile entries are refused
    for bad in (pb.DNSConfig(servers=["10.0.0.1\nnameserver 6.6.6.6"]),
                pb.DNSConfig(searches=["a b"]), pb.DNSConfig(servers=["not-an-ip"])):
        with pytest.raises(grpc.RpcError) as e:
            run_pod(cri, rs, pod_config(cri, "bad", cgroup_parent[0], dns_config=bad))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    for p in (pid, pid2):
        stop_remove(cri, rs, p)


def test_sysctls(cri, pd, cgroup_parent):
    pb = cri.pb
    rs = runtime(cri, pd)
    sysctls = {"net.ipv4.ip_unprivileged_port_start": "53", "kernel.shmmni": "1234",
               "net.ipv4.conf.eth0.rp_filter": "2", "fs/mqueue/msg_max": "20"}
    pid = run_pod(cri, rs, pod_config(cri, "sc", cgroup_parent[0], sysctls=sysctls))
    inf = info(cri, rs, pid)
    netns, ipcns = inf["netns"], inf["ipcNamespace"]
    assert pd.run("cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start",
                  net=netns).stdout.strip() == "53"
    assert pd.run("cat", "/proc/sys/net/ipv4/conf/eth0/rp_filter", net=netns).stdout.strip() == "2"
    r = pd.run("nsenter", "--ipc=" + ipcns, "cat", "/proc/sys/kernel/shmmni",
               "/proc/sys/fs/mqueue/msg_max")
    assert r.stdout.split() == ["1234", "20"]
    # the node's own values are untouched
    assert open("/proc/sys/kernel/shmmni").read().strip() != "1234"
    stop_remove(cri, rs, pid)
    for bad, kw in ((({"kernel.panic": "1"}), {}), ({"vm.swappiness": "1"}, {}),
                    ({"net.ipv4.ip_forward": "1"}, {"net": pb.NODE}),
                    ({"kernel.shmmax": "1"}, {"ipc": pb.NODE}),
                    ({"net/../../kernel/panic": "1"}, {})):
        with pytest.raises(grpc.RpcError) as e:
            run_pod(cri, rs, pod_config(cri, "bad", cgroup_parent[0], sysctls=bad, **kw))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, bad
    assert not rs.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items


def test_bad_requests(cri, pd, cgroup_parent):
    pb = cri.pb
    rs = runtime(cri, pd)
    with pytest.raises(grpc.RpcError) as e:
        run_pod(cri, rs, pod_config(cri, "h", cgroup_parent[0]), handler="kata")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:
        rs.RunPodSandbox(pb.RunPodSandboxRequest(config=pb.PodSandboxConfig()), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    cfg = pod_config(cri, "dup", cgroup_parent[0])
    pid = run_pod(cri, rs, cfg)
    with pytest.raises(grpc.RpcError) as e:
        run_pod(cri, rs, cfg)
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
    stop_remove(cri, rs, pid)
    # a failure half-way (the network refuses the host IP) undoes everything
    cfg = pod_config(cri, "half", cgroup_parent[0], port_mappings=[
        pb.PortMapping(protocol=pb.TCP, container_port=80, host_port=8081, host_ip="1.2.3.4.5")])
    with pytest.raises(grpc.RpcError) as e:
        run_pod(cri, rs, cfg)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert not os.listdir(os.path.join(pd.state, "pods"))
    assert not [x for x in os.listdir(cgroup_parent[1]) if len(x) == 64]
    assert "/pods/" not in mounts(pd)
    assert " kl" not in pd.run("ip", "-o", "link").stdout
    # unknown pods: Stop and Remove are OK, Status is NOT_FOUND
    rs.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id="0" * 64), timeout=10)
    rs.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id="0" * 64), timeout=10)
    with pytest.raises(grpc.RpcError) as e:
        status(cri, rs, "0" * 64)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_50_concurrent_pods_get_distinct_addresses(cri, pd, cgroup_parent):
    rs = runtime(cri, pd)
    ids, errors = [None] * 50, []

    def one(i):
        try:
            ids[i] = run_pod(cri, rs, pod_config(cri, f"c{i}", cgroup_parent[0]))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    ips = [status(cri, rs, p).status.network.ip for p in ids]
    assert len(set(ips)) == 50 and all(ip.startswith("10.77.0.") for ip in ips)
    # each address is really on the pod's eth0
    for p, ip in zip(ids[:5], ips[:5]):
        assert ip in pd.run("ip", "-4", "-o", "addr", "show", "eth0",
                            net=info(cri, rs, p)["netns"]).stdout
    errs = []

    def rm(p):
        try:
            stop_remove(cri, rs, p)
        except Exception as e:  # noqa: BLE001
            errs.append(e)

    threads = [threading.Thread(target=rm, args=(p,)) for p in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errs, errs
    assert not rs.ListPodSandbox(cri.pb.ListPodSandboxRequest(), timeout=10).items


def test_pool_exhausted_is_a_clear_error(cri, pod_daemon_factory, cgroup_parent):
    d = pod_daemon_factory(["--pod-cidr", "10.78.0.0/30"])  # room for one pod
    rs = runtime(cri, d)
    p = run_pod(cri, rs, pod_config(cri, "one", cgroup_parent[0]))
    with pytest.raises(grpc.RpcError) as e:
        run_pod(cri, rs, pod_config(cri, "two", cgroup_parent[0]))
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "exhausted" in e.value.details() or "no free" in e.value.details()
    stop_remove(cri, rs, p)
    # the address is free again (released in the background after Stop)
    wait_for(lambda: not leases(d), 10, what="lease release")
    stop_remove(cri, rs, run_pod(cri, rs, pod_config(cri, "three", cgroup_parent[0])))
    assert d.stop() == 0


def test_sigkill_restart_keeps_pods(cri, pod_daemon_factory, cgroup_parent):
    pb = cri.pb
    d = pod_daemon_factory(["--pod-cidr", CIDR])
    rs = runtime(cri, d)
    ids = [run_pod(cri, rs, pod_config(cri, f"r{i}", cgroup_parent[0],
                                       pid=pb.POD if i % 2 else pb.CONTAINER,
                                       labels={"i": str(i)}))
           for i in range(10)]
    before = {p: (status(cri, rs, p).status.network.ip, info(cri, rs, p)) for p in ids}
    rs.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=ids[9]), timeout=30)
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    d.log.close()
    d.start()
    rs = runtime(cri, d)
    items = {i.id: i for i in rs.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items}
    assert set(items) == set(ids)
    for n, p in enumerate(ids):
        st = status(cri, rs, p).status
        assert st.labels == {"i": str(n)}
        if n == 9:
            assert st.state == pb.SANDBOX_NOTREADY
            continue
        assert st.state == pb.SANDBOX_READY
        assert st.network.ip == before[p][0]
        inf = info(cri, rs, p)
        assert inf["pid"] == before[p][1]["pid"]
        if inf["pid"]:
            assert alive(inf["pid"])
    # the network is intact: pod 0 reaches pod 1 and the node
    ns0 = info(cri, rs, ids[0])["netns"]
    r = d.run("busybox", "ping", "-c", "1", "-W", "5", before[ids[1]][0], net=ns0, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    # a new pod does not get an address in use
    extra = run_pod(cri, rs, pod_config(cri, "extra", cgroup_parent[0]))
    assert status(cri, rs, extra).status.network.ip not in {v[0] for v in before.values()}
    for p in ids + [extra]:
        stop_remove(cri, rs, p)
    assert not rs.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items
    assert d.stop() == 0


def test_restart_cleans_up_a_pod_cut_short(cri, pod_daemon_factory, cgroup_parent):
    """A RunPodSandbox that a crash cut short leaves a state directory and a
    lease without a record: the next start removes them."""
    d = pod_daemon_factory(["--pod-cidr", CIDR])
    rs = runtime(cri, d)
    p = run_pod(cri, rs, pod_config(cri, "cut", cgroup_parent[0], pid=cri.pb.POD))
    inf = info(cri, rs, p)
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    d.log.close()
    os.unlink(os.path.join(d.root, "pods", p + ".json"))  # as if never persisted
    d.start()
    wait_for(lambda: not os.path.exists(os.path.join(d.state, "pods", p)), 20,
             what="the remains to be removed")
    assert "/pods/" not in mounts(d), d.logtext()
    assert " kl" not in d.run("ip", "-o", "link").stdout, d.logtext()
    leases = os.path.join(d.root, "net", "ipam")
    assert not [f for dp, _, fs in os.walk(leases) for f in fs if not f.startswith(".")]
    rs = runtime(cri, d)
    assert not rs.ListPodSandbox(cri.pb.ListPodSandboxRequest(), timeout=10).items
    assert d.stop() == 0


LEAK_CYCLES = int(os.environ.get("KINGLET_LEAK_CYCLES", "200"))


@pytest.mark.slow
def test_no_leaks_after_many_cycles(cri, pd, cgroup_parent):
    pb = cri.pb
    rs = runtime(cri, pd)
    # warm up (bridge, nftables table, thread pool), then take the baseline
    stop_remove(cri, rs, run_pod(cri, rs, pod_config(cri, "warm", cgroup_parent[0])))
    fds = pd.settled_fds()
    for i in range(LEAK_CYCLES):
        cfg = pod_config(cri, f"leak{i}", cgroup_parent[0], pid=pb.POD if i % 2 else pb.CONTAINER,
                         port_mappings=[pb.PortMapping(protocol=pb.TCP if i % 3 else pb.UDP,
                                                       container_port=80, host_port=9000)],
                         dns_config=pb.DNSConfig(servers=["10.96.0.10"]),
                         sysctls={"net.ipv4.ip_unprivileged_port_start": "0"})
        stop_remove(cri, rs, run_pod(cri, rs, cfg))
    assert not rs.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items
    wait_for(lambda: not leases(pd), 20, what="lease release")
    m = mounts(pd)
    assert "/pods/" not in m, "mounts left"
    assert "nsfs" not in m, "namespace mounts left"
    links = pd.run("ip", "-o", "link").stdout
    assert " kl" not in links, "veths left"
    assert not pd.run("ip", "-o", "link", "show", "master", "kinglet0").stdout, "bridge ports left"
    assert "kinglet:" not in pd.run("nft", "list", "table", "inet", "kinglet").stdout, "rules left"
    assert not leases(pd), "leases left"
    assert not [x for x in os.listdir(cgroup_parent[1]) if len(x) == 64], "cgroups left"
    assert not os.listdir(os.path.join(pd.state, "pods")), "state directories left"
    assert not os.listdir(os.path.join(pd.root, "pods")), "records left"
    # fewer is no leak: the baseline may catch a worker's short-lived socket
    pd.settled_fds()
    pd.wait_fds_back(fds, what="the daemon's fds to settle (a leak?)")
    assert not [p for p in os.listdir("/proc") if p.isdigit() and alive(int(p)) and
                _comm(p) == "pod-init" and _in_cgroup(p, cgroup_parent[0])], "pod inits left"


def _comm(p):
    try:
        with open(f"/proc/{p}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _in_cgroup(p, parent):
    """Whether p is in a cgroup below parent (a pod init has a mount
    namespace of its own: only its cgroup says whose it is)."""
    try:
        with open(f"/proc/{p}/cgroup") as f:
            return any(line.split(":", 2)[2].startswith(parent + "/") for line in f)
    except OSError:
        return False


def test_network_ready_and_dual_stack(cri, pod_daemon_factory, cgroup_parent):
    pb = cri.pb
    d = pod_daemon_factory(["--pod-cidr", "10.79.0.0/24,fd00:79::/64", "--bridge", "kt-br0"])
    rs = runtime(cri, d)

    def conds():
        st = rs.Status(pb.StatusRequest(), timeout=10).status
        return {c.type: c for c in st.conditions}

    c = wait_for(lambda: (lambda c: c["NetworkReady"].status and c["RuntimeReady"].status
                          and c)(conds()), 15, what="NetworkReady and RuntimeReady")
    p = run_pod(cri, rs, pod_config(cri, "ds", cgroup_parent[0]))
    net = status(cri, rs, p).status.network
    assert net.ip.startswith("10.79.0.")
    assert [x.ip for x in net.additional_ips][0].startswith("fd00:79::")
    assert ": kl" in d.run("ip", "-o", "link", "show", "master", "kt-br0").stdout
    out = d.run("ip", "-6", "-o", "addr", "show", "eth0", net=info(cri, rs, p)["netns"]).stdout
    assert net.additional_ips[0].ip in out
    stop_remove(cri, rs, p)
    # the node's nftables table goes away: NetworkReady says so
    d.run("nft", "delete", "table", "inet", "kinglet")
    wait_for(lambda: not conds()["NetworkReady"].status, 15, what="NetworkReady false")
    assert "nftables" in conds()["NetworkReady"].message
    assert d.stop() == 0


def test_pod_cidr_from_kubelet(cri, pod_daemon_factory, cgroup_parent):
    pb = cri.pb
    d = pod_daemon_factory()
    rs = runtime(cri, d)
    rs.UpdateRuntimeConfig(pb.UpdateRuntimeConfigRequest(runtime_config=pb.RuntimeConfig(
        network_config=pb.NetworkConfig(pod_cidr="10.80.1.0/24"))), timeout=10)
    p = run_pod(cri, rs, pod_config(cri, "k", cgroup_parent[0]))
    assert status(cri, rs, p).status.network.ip.startswith("10.80.1.")
    stop_remove(cri, rs, p)
    assert d.stop() == 0


# Pod CIDRs the network code cannot use, and what the refusal must say.
BAD_POD_CIDRS = [
    ("10.0.0.0/31", "IPv4 /8 to /30"),
    ("10.0.0.0/32", "IPv4 /8 to /30"),
    ("10.0.0.0/7", "IPv4 /8 to /30"),
    ("fd00::/127", "IPv6 /8 to /126"),
    ("garbage", "IPv4 /8 to /30, IPv6 /8 to /126"),
    ("10.81.1.7/24", "host bits set (the network is `10.81.1.0/24`)"),
    ("10.82.0.0/16,10.83.0.0/16", "one per family"),
]


def test_pod_cidr_from_kubelet_is_checked_once(cri, pod_daemon_factory, cgroup_parent):
    """UpdateRuntimeConfig refuses what RunPodSandbox could not use (a /31
    was saved and then failed every pod), naming the CIDR and the allowed
    range; the CIDR in use stays, also across a restart."""
    pb = cri.pb
    d = pod_daemon_factory()
    rs = runtime(cri, d)

    def update(cidr):
        rs.UpdateRuntimeConfig(pb.UpdateRuntimeConfigRequest(runtime_config=pb.RuntimeConfig(
            network_config=pb.NetworkConfig(pod_cidr=cidr))), timeout=10)
    update("10.80.1.0/24")
    for cidr, why in BAD_POD_CIDRS:
        with pytest.raises(grpc.RpcError) as e:
            update(cidr)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, cidr
        assert f"`{cidr.split(',')[0]}" in e.value.details() and why in e.value.details(), \
            e.value.details()
    p = run_pod(cri, rs, pod_config(cri, "k", cgroup_parent[0]))
    assert status(cri, rs, p).status.network.ip.startswith("10.80.1.")
    stop_remove(cri, rs, p)
    d.proc.kill()
    d.proc.wait()
    d.log.close()
    d.start()
    rs = runtime(cri, d)
    p = run_pod(cri, rs, pod_config(cri, "k2", cgroup_parent[0]))
    assert status(cri, rs, p).status.network.ip.startswith("10.80.1.")
    stop_remove(cri, rs, p)
    # IPv6 too, as the network code takes it
    update("10.80.2.0/24,fd00:80::/64")
    p = run_pod(cri, rs, pod_config(cri, "k3", cgroup_parent[0]))
    net = status(cri, rs, p).status.network
    assert net.ip.startswith("10.80.2.") and net.additional_ips[0].ip.startswith("fd00:80::")
    stop_remove(cri, rs, p)
    assert d.stop() == 0


@pytest.mark.parametrize("cidr,why", BAD_POD_CIDRS, ids=[c for c, _ in BAD_POD_CIDRS])
def test_pod_cidr_flag_is_checked_as_kubelets(cri, pod_daemon_factory, cidr, why):
    d = pod_daemon_factory(["--pod-cidr", cidr], start=False)
    d.start(wait=False)
    rc = d.proc.wait(timeout=60)
    assert rc != 0
    log = d.logtext()
    assert f"`{cidr.split(',')[0]}" in log and why in log, log


def test_default_cgroup_parent_and_pod_network_none(cri, pod_daemon_factory):
    pb = cri.pb
    d = pod_daemon_factory(["--pod-network", "none"])
    rs = runtime(cri, d)
    with pytest.raises(grpc.RpcError) as e:
        run_pod(cri, rs, pod_config(cri, "n"))
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    p = run_pod(cri, rs, pod_config(cri, "h", net=pb.NODE))
    cg = info(cri, rs, p)["cgroupPath"]
    assert cg.endswith("/kinglet/" + p) and os.path.isdir(cg)
    stop_remove(cri, rs, p)
    assert not os.path.exists(cg)
    assert d.stop() == 0


def test_configured_runtime_handler(cri, pod_daemon_factory, cgroup_parent):
    pb = cri.pb
    d = pod_daemon_factory(["--pod-cidr", CIDR, "--runtime-handler", "runc"])
    rs = runtime(cri, d)
    names = [h.name for h in rs.Status(pb.StatusRequest(), timeout=10).runtime_handlers]
    assert names == ["", "runc"]
    p = run_pod(cri, rs, pod_config(cri, "rc", cgroup_parent[0]), handler="runc")
    assert status(cri, rs, p).status.runtime_handler == "runc"
    assert rs.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items[0].runtime_handler \
        == "runc"
    with pytest.raises(grpc.RpcError) as e:
        run_pod(cri, rs, pod_config(cri, "k", cgroup_parent[0]), handler="kata")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    stop_remove(cri, rs, p)
    assert d.stop() == 0


def test_dead_init_makes_the_pod_notready(cri, pod_daemon_factory, cgroup_parent):
    pb = cri.pb
    d = pod_daemon_factory(["--pod-cidr", CIDR])
    rs = runtime(cri, d)
    a = run_pod(cri, rs, pod_config(cri, "a", cgroup_parent[0], pid=pb.POD))
    b = run_pod(cri, rs, pod_config(cri, "b", cgroup_parent[0], pid=pb.POD))
    for p in (a, b):
        assert status(cri, rs, p).status.state == pb.SANDBOX_READY
    os.kill(info(cri, rs, a)["pid"], signal.SIGKILL)
    wait_for(lambda: status(cri, rs, a).status.state == pb.SANDBOX_NOTREADY, 10,
             what="NOTREADY after the init died")
    f = pb.PodSandboxFilter(state=pb.PodSandboxStateValue(state=pb.SANDBOX_READY))
    assert [i.id for i in rs.ListPodSandbox(pb.ListPodSandboxRequest(filter=f)).items] == [b]
    # the same after a restart (b's init dies while the daemon is down)
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    d.log.close()
    os.kill(_init_of(d, b), signal.SIGKILL)
    d.start()
    rs = runtime(cri, d)
    for p in (a, b):
        assert status(cri, rs, p).status.state == pb.SANDBOX_NOTREADY
        stop_remove(cri, rs, p)
    wait_for(lambda: not leases(d), 10, what="lease release")
    assert " kl" not in d.run("ip", "-o", "link").stdout
    assert d.stop() == 0


def _init_of(d, pod):
    with open(os.path.join(d.root, "pods", pod + ".json")) as f:
        return json.load(f)["initPid"]


def test_hostile_requests_and_racing_stops(cri, pd, cgroup_parent):
    pb = cri.pb
    rs = runtime(cri, pd)
    for parent in ("/../../etc", "relative/path", "/a/../../b"):
        with pytest.raises(grpc.RpcError) as e:
            run_pod(cri, rs, pod_config(cri, "cg", parent))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, parent
    with pytest.raises(grpc.RpcError) as e:
        run_pod(cri, rs, pod_config(cri, "big", cgroup_parent[0],
                                    annotations={"x": "y" * (600 << 10)}))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:
        run_pod(cri, rs, pod_config(cri, "host", cgroup_parent[0], hostname="a/b"))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:
        run_pod(cri, rs, pod_config(cri, "ports", cgroup_parent[0], port_mappings=[
            pb.PortMapping(protocol=pb.TCP, container_port=70000, host_port=1)]))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    podsdir = os.path.join(pd.state, "pods")
    assert not os.path.exists(podsdir) or not os.listdir(podsdir)
    # many Stops and Removes of one pod at once: all succeed, it is gone
    p = run_pod(cri, rs, pod_config(cri, "race", cgroup_parent[0], pid=pb.POD))
    errs = []

    def call(fn, req):
        try:
            fn(req, timeout=60)
        except grpc.RpcError as e:
            errs.append(e)

    ts = [threading.Thread(target=call, args=(rs.StopPodSandbox,
                                              pb.StopPodSandboxRequest(pod_sandbox_id=p)))
          for _ in range(5)]
    ts += [threading.Thread(target=call, args=(rs.RemovePodSandbox,
                                               pb.RemovePodSandboxRequest(pod_sandbox_id=p)))
           for _ in range(5)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs, errs
    assert not rs.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items
    assert not os.path.exists(os.path.join(pd.state, "pods", p))
    # an ambiguous prefix is refused, not guessed
    a = run_pod(cri, rs, pod_config(cri, "a", cgroup_parent[0]))
    b = run_pod(cri, rs, pod_config(cri, "b", cgroup_parent[0]))
    common = os.path.commonprefix([a, b])
    if common:
        with pytest.raises(grpc.RpcError) as e:
            status(cri, rs, common)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert status(cri, rs, a[:len(common) + 1]).status.id == a
    for x in (a, b):
        stop_remove(cri, rs, x)


def test_sigkill_during_concurrent_creation(cri, pod_daemon_factory, cgroup_parent):
    """SIGKILL while 20 RunPodSandbox calls are in flight: after a restart
    every pod is either listed (and works, and goes away cleanly) or left
    nothing behind."""
    pb = cri.pb
    d = pod_daemon_factory(["--pod-cidr", CIDR])
    rs = runtime(cri, d)
    done = []

    def one(i):
        try:
            done.append(run_pod(cri, rs, pod_config(cri, f"k{i}", cgroup_parent[0],
                                                    pid=pb.POD if i % 2 else pb.CONTAINER)))
        except grpc.RpcError:
            pass

    threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    wait_for(lambda: len(done) >= 3, 30, interval=0.001, what="a few pods")
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    d.log.close()
    for t in threads:
        t.join()
    d.start()
    rs = runtime(cri, d)
    try:
        listed = [i.id for i in rs.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items]
    except Exception:
        import shutil as _sh
        _sh.copy(d.log_path, "/tmp/kc-daemon.log")
        raise
    assert set(done) <= set(listed)
    # remains of the unfinished ones are removed at start
    wait_for(lambda: sorted(os.listdir(os.path.join(d.state, "pods"))) == sorted(listed), 30,
             what="unfinished pods removed")
    ips = [status(cri, rs, p).status.network.ip for p in listed]
    assert len(set(ips)) == len(ips)
    for p in listed:
        assert status(cri, rs, p).status.state == pb.SANDBOX_READY
        stop_remove(cri, rs, p)
    wait_for(lambda: not leases(d), 10, what="lease release")
    assert "/pods/" not in mounts(d)
    assert " kl" not in d.run("ip", "-o", "link").stdout
    assert not [x for x in os.listdir(cgroup_parent[1]) if len(x) == 64], d.logtext()
    assert d.stop() == 0


def test_sigterm_keeps_pods_running(cri, pod_daemon_factory, cgroup_parent):
    pb = cri.pb
    d = pod_daemon_factory(["--pod-cidr", CIDR])
    rs = runtime(cri, d)
    up = run_pod(cri, rs, pod_config(cri, "up", cgroup_parent[0], pid=pb.POD))
    down = run_pod(cri, rs, pod_config(cri, "down", cgroup_parent[0]))
    ip = status(cri, rs, up).status.network.ip
    init = info(cri, rs, up)["pid"]
    rs.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=down), timeout=30)
    assert d.stop() == 0  # SIGTERM; the stopped pod's teardown finishes first
    assert len(leases(d)) == 1
    assert alive(init)
    d.start()
    rs = runtime(cri, d)
    st = status(cri, rs, up).status
    assert st.state == pb.SANDBOX_READY and st.network.ip == ip
    assert status(cri, rs, down).status.state == pb.SANDBOX_NOTREADY
    for p in (up, down):
        stop_remove(cri, rs, p)
    assert not alive(init)
    assert d.stop() == 0


def test_overhead_limits_the_sandbox_cgroup(cri, pd, cgroup_parent):
    pb = cri.pb
    rs = runtime(cri, pd)
    cfg = pod_config(cri, "oh", cgroup_parent[0], pid=pb.POD)
    cfg.linux.overhead.CopyFrom(pb.LinuxContainerResources(memory_limit_in_bytes=64 << 20,
                                                           cpu_shares=256))
    p = run_pod(cri, rs, cfg)
    cg = info(cri, rs, p)["cgroupPath"]
    parent = os.path.dirname(cg)
    controllers = open(os.path.join(parent, "cgroup.subtree_control")).read().split()
    if "memory" in controllers:
        assert open(os.path.join(cg, "memory.max")).read().strip() == str(64 << 20)
    else:  # hybrid host: the pod runs, and the log says the limit is not enforced
        assert "memory controller is not available" in pd.logtext()
    stop_remove(cri, rs, p)
