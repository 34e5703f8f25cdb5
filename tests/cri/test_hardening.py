"""Hardening of the pod side (issue 9): namespace modes, names and log
injection, host ports, record writes and their leftovers, file modes, and
the default pod MTU. Daemons that make pods run in namespaces of their own
(PodDaemon); the others run with pod networking off and make no pod."""
import concurrent.futures
import json
import os
import re
import stat
import subprocess
import uuid

import grpc
import pytest

from .conftest import channel, wait_for

CIDR = "10.79.0.0/24"
FORGED = "2026-01-01T00:00:00.000000Z error FORGED LINE"


def runtime(cri, d):
    return cri.grpc.RuntimeServiceStub(channel(d))


# The cgroup parent of the running test's pods (cgroup_parent fixture).
CGROUP = {"parent": ""}


@pytest.fixture(autouse=True)
def cgroup_parent():
    """A cgroup parent of the test's own, removed afterwards: pods without
    one would leave the daemon's default parent behind."""
    root = "/sys/fs/cgroup/unified"
    if not os.path.exists(root + "/cgroup.procs"):
        root = "/sys/fs/cgroup"
    name = os.environ["KINGLET_TEST_CGROUP"] + "/kinglet-test-" + uuid.uuid4().hex[:8]
    CGROUP["parent"] = "/" + name
    yield
    CGROUP["parent"] = ""
    path = os.path.join(root, name)
    if os.path.isdir(path):
        for sub in sorted((os.path.join(dp, x) for dp, dns, _ in os.walk(path) for x in dns),
                          key=len, reverse=True):
            os.rmdir(sub)
        os.rmdir(path)


def pod_config(cri, name="p", namespace="default", uid=None, net=None, pid=None, ipc=None,
               **kw):
    pb = cri.pb
    ns = pb.NamespaceOption(network=pb.POD if net is None else net,
                            pid=pb.CONTAINER if pid is None else pid,
                            ipc=pb.POD if ipc is None else ipc,
                            target_id=kw.pop("target_id", ""))
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=name, namespace=namespace,
                                       uid=uid if uid is not None else uuid.uuid4().hex),
        hostname=kw.pop("hostname", "h"),
        linux=pb.LinuxPodSandboxConfig(
            cgroup_parent=CGROUP["parent"],
            security_context=pb.LinuxSandboxSecurityContext(namespace_options=ns)),
        **kw)


def refused(cri, rs, cfg, handler=""):
    with pytest.raises(grpc.RpcError) as e:
        rs.RunPodSandbox(cri.pb.RunPodSandboxRequest(config=cfg, runtime_handler=handler),
                         timeout=30)
    return e.value


def run_pod(cri, rs, cfg):
    return rs.RunPodSandbox(cri.pb.RunPodSandboxRequest(config=cfg), timeout=60).pod_sandbox_id


def stop_remove(cri, rs, pid):
    rs.StopPodSandbox(cri.pb.StopPodSandboxRequest(pod_sandbox_id=pid), timeout=60)
    rs.RemovePodSandbox(cri.pb.RemovePodSandboxRequest(pod_sandbox_id=pid), timeout=60)


def remove_all_pods(cri, d):
    """Stops and removes whatever pods d still has (a test that failed
    half-way), so that no init, mount or cgroup outlives the test."""
    if not d.proc or d.proc.poll() is not None:
        return
    rs = runtime(cri, d)
    for p in rs.ListPodSandbox(cri.pb.ListPodSandboxRequest(), timeout=10).items:
        stop_remove(cri, rs, p.id)


@pytest.fixture
def make_daemon(cri, pod_daemon_factory):
    """Daemons in namespaces of their own (even those of tests that expect
    refusals: on a broken build they would make pods); their pods are
    removed at the end, whatever happened."""
    made = []

    def make(args=(), start=True):
        d = pod_daemon_factory(["--pod-cidr", CIDR, *args], start=start)
        made.append(d)
        return d
    yield make
    for d in made:
        try:
            remove_all_pods(cri, d)
        finally:
            rc = d.stop()
        assert rc in (0, None), f"daemon exited with {rc}:\n{d.logtext()}"


@pytest.fixture
def pd(make_daemon):
    return make_daemon()


def dead_pid():
    """The pid of a process that has exited (and been reaped)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


# ---- item 7: namespace modes -------------------------------------------------

def test_pod_namespace_modes_are_validated(cri, pd):
    pb = cri.pb
    rs = runtime(cri, pd)
    cases = [
        (dict(pid=pb.TARGET), "TARGET needs target_id naming a container"),
        (dict(pid=pb.TARGET, target_id="0123abcd"), "is for containers"),
        (dict(pid=9), "namespace_options.pid: undefined namespace mode 9"),
        (dict(net=9), "namespace_options.network: undefined namespace mode 9"),
        (dict(ipc=7), "namespace_options.ipc: undefined namespace mode 7"),
        (dict(net=pb.CONTAINER), "namespace_options.network: a pod cannot use mode CONTAINER"),
        (dict(ipc=pb.TARGET), "namespace_options.ipc: a pod cannot use mode TARGET"),
    ]
    for kw, why in cases:
        e = refused(cri, rs, pod_config(cri, net=kw.pop("net", pb.NODE), **kw))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (kw, e)
        assert why in e.details(), (kw, e.details())
    cfg = pod_config(cri, net=pb.NODE)
    cfg.linux.security_context.namespace_options.userns_options.mode = 5
    e = refused(cri, rs, cfg)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "userns_options.mode: undefined namespace mode 5" in e.details()
    assert not rs.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items


def test_valid_pid_modes_still_run(cri, pd):
    """POD, CONTAINER and NODE pass validation and run (a pod-network daemon
    of its own namespaces)."""
    pb = cri.pb
    rs = runtime(cri, pd)
    for mode in (pb.POD, pb.CONTAINER, pb.NODE):
        pid = run_pod(cri, rs, pod_config(cri, f"m{mode}", pid=mode))
        st = rs.PodSandboxStatus(pb.PodSandboxStatusRequest(pod_sandbox_id=pid), timeout=10)
        assert st.status.linux.namespaces.options.pid == mode
        stop_remove(cri, rs, pid)


# ---- item 8: names and log injection -----------------------------------------

def log_lines(d):
    return d.logtext().splitlines()


def assert_not_forged(d):
    for line in log_lines(d):
        assert not line.startswith(FORGED), f"forged log line: {line!r}"
        assert "\x1b" not in line and "\r" not in line, line


def test_log_injection_text(cri, pd):
    daemon = pd
    pb = cri.pb
    rs = runtime(cri, daemon)
    e = refused(cri, rs, pod_config(cri, "x\n" + FORGED, net=pb.NODE))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "config.metadata.name" in e.details()
    # strings that are logged without being validated first: a runtime
    # handler, an image reference
    e = refused(cri, rs, pod_config(cri, "ok", net=pb.NODE), handler="h\n" + FORGED)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    ims = cri.grpc.ImageServiceStub(channel(daemon))
    with pytest.raises(grpc.RpcError):
        ims.PullImage(pb.PullImageRequest(image=pb.ImageSpec(image="a\r\n" + FORGED + "\x1b[2J")),
                      timeout=30)
    wait_for(lambda: sum("FORGED LINE" in line for line in log_lines(daemon)) >= 3,
             what="the three refusals in the log")
    assert_not_forged(daemon)
    text = daemon.logtext()
    assert "x\\n" + FORGED in text  # escaped, on the refusal's own line
    assert "\\x1b[2J" in text


def test_log_injection_json(cri, make_daemon):
    d = make_daemon(["--log-format", "json"])
    pb = cri.pb
    rs = runtime(cri, d)
    refused(cri, rs, pod_config(cri, "ok", net=pb.NODE), handler="h\n" + FORGED + "\x7f\x01")
    wait_for(lambda: "FORGED" in d.logtext(), what="the refusal in the log")
    assert d.stop() == 0
    msgs = []
    for line in log_lines(d):
        rec = json.loads(line)  # every line one whole JSON object
        assert set(rec) == {"time", "level", "msg"}
        msgs.append(rec["msg"])
    assert any("h\n" + FORGED + "\x7f\x01" in m for m in msgs)
    assert_not_forged(d)


def test_metadata_names_are_validated(cri, pd):
    daemon = pd
    pb = cri.pb
    rs = runtime(cri, daemon)
    bad = [
        (dict(name="a_b"), "config.metadata.name"),
        (dict(name="-a"), "config.metadata.name"),
        (dict(name="a" * 254), "config.metadata.name"),
        (dict(name="a..b"), "config.metadata.name"),
        (dict(namespace="kube.system"), "config.metadata.namespace"),
        (dict(namespace="n" * 64), "config.metadata.namespace"),
        (dict(namespace="a\tb"), "config.metadata.namespace"),
        (dict(uid="../../etc"), "config.metadata.uid"),
        (dict(uid="u" * 129), "config.metadata.uid"),
        (dict(uid="a b"), "config.metadata.uid"),
    ]
    for kw, field in bad:
        e = refused(cri, rs, pod_config(cri, **{"name": "p", **kw}, net=pb.NODE))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (kw, e)
        assert field in e.details(), (kw, e.details())
    # container names: checked before the pod is looked up
    for name, code in [("c_1", grpc.StatusCode.INVALID_ARGUMENT),
                       ("a.b", grpc.StatusCode.INVALID_ARGUMENT),
                       ("x\n" + FORGED, grpc.StatusCode.INVALID_ARGUMENT),
                       ("container-for-execSync-timeout-test-" + str(uuid.uuid4()),
                        grpc.StatusCode.NOT_FOUND)]:
        with pytest.raises(grpc.RpcError) as e:
            rs.CreateContainer(pb.CreateContainerRequest(
                pod_sandbox_id="0" * 64, config=pb.ContainerConfig(
                    metadata=pb.ContainerMetadata(name=name),
                    image=pb.ImageSpec(image="busybox"))), timeout=10)
        assert e.value.code() == code, (name, e.value)
    assert_not_forged(daemon)


def test_names_kubelet_and_critest_send_are_accepted(cri, pd):
    pb = cri.pb
    rs = runtime(cri, pd)
    u = str(uuid.uuid4())
    names = [
        ("coredns-5d78c9869d-x2x7l", "kube-system", u),
        ("kube-proxy.node-1.example", "default", "0f1e2d3c4b5a69788796a5b4c3d2e1f0"),
        ("create-PodSandbox-for-container-" + u, "cri-test-namespace" + u, "cri-test-uid" + u),
        ("a" * 253, "n" * 63, "u" * 128),
    ]
    for name, ns, uid in names:
        pid = run_pod(cri, rs, pod_config(cri, name, ns, uid, net=pb.NODE))
        st = rs.PodSandboxStatus(pb.PodSandboxStatusRequest(pod_sandbox_id=pid), timeout=10)
        assert (st.status.metadata.name, st.status.metadata.namespace) == (name, ns)
        stop_remove(cri, rs, pid)


# ---- item 9: host ports ------------------------------------------------------

def hostport_rules(d):
    out = d.run("nft", "list", "chain", "inet", "kinglet", "hostports", check=False).stdout
    return [line for line in out.splitlines() if "dnat" in line]


def test_host_port_conflicts(cri, pd):
    pb = cri.pb
    rs = runtime(cri, pd)

    def pm(port, proto=pb.TCP, ip="", cport=80):
        return pb.PortMapping(protocol=proto, container_port=cport, host_port=port, host_ip=ip)

    # twice in one pod
    e = refused(cri, rs, pod_config(cri, "twice", port_mappings=[pm(8080), pm(8080, cport=81)]))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "port_mappings[1]: host port tcp/8080 on every address is already mapped by " \
           "port_mappings[0]" in e.details()
    e = refused(cri, rs, pod_config(cri, "twice",
                                    port_mappings=[pm(9000, ip="10.1.1.1"), pm(9000, ip="0.0.0.0")]))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert not rs.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items
    assert not hostport_rules(pd)

    holder = run_pod(cri, rs, pod_config(cri, "holder", port_mappings=[pm(8080), pm(53, pb.UDP)]))
    n_rules = len(hostport_rules(pd))
    assert n_rules == 2
    for ports in ([pm(8080)], [pm(8080, ip="10.1.1.1")], [pm(8080, ip="::")],
                  [pm(7000), pm(53, pb.UDP, ip="127.0.0.1")]):
        e = refused(cri, rs, pod_config(cri, "second", port_mappings=ports))
        assert e.code() == grpc.StatusCode.FAILED_PRECONDITION, (ports, e)
        assert "is held by pod default/holder (`%s`)" % holder in e.details(), e.details()
    assert len(hostport_rules(pd)) == n_rules  # nothing added by the refusals
    # another protocol or port is free
    other = run_pod(cri, rs, pod_config(cri, "other", port_mappings=[pm(8080, pb.UDP), pm(8081)]))
    # a restarted daemon: the recovered pod still holds its ports
    assert pd.stop() == 0
    pd.start()
    rs = runtime(cri, pd)
    e = refused(cri, rs, pod_config(cri, "after", port_mappings=[pm(8080, ip="10.2.2.2")]))
    assert e.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert holder in e.details()
    # released on stop
    rs.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=holder), timeout=60)
    third = run_pod(cri, rs, pod_config(cri, "third", port_mappings=[pm(8080)]))
    e = refused(cri, rs, pod_config(cri, "fourth", port_mappings=[pm(8080)]))
    assert third in e.details()
    for p in (holder, other, third):
        stop_remove(cri, rs, p)
    # released on remove as well: a stopped pod's record does not hold them
    assert not hostport_rules(pd)
    last = run_pod(cri, rs, pod_config(cri, "last", port_mappings=[pm(8080), pm(8081)]))
    stop_remove(cri, rs, last)


# ---- item 13: concurrent record writes ---------------------------------------

def test_concurrent_update_runtime_config(cri, daemon_factory):
    d = daemon_factory()  # no pod networking, and it makes no pod
    pb = cri.pb
    path = os.path.join(d.root, "runtime-config.json")
    cidrs = [f"10.{60 + i}.0.0/16" for i in range(4)]

    def update(c):
        return runtime(cri, d).UpdateRuntimeConfig(pb.UpdateRuntimeConfigRequest(
            runtime_config=pb.RuntimeConfig(network_config=pb.NetworkConfig(pod_cidr=c))),
            timeout=10)

    def in_use():
        st = runtime(cri, d).Status(pb.StatusRequest(verbose=True), timeout=10)
        return json.loads(st.info["config"])["podCIDR"]

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        for rnd in range(8):
            order = cidrs[rnd % 4:] + cidrs[:rnd % 4]
            for f in [ex.submit(update, c) for c in order]:
                f.result()  # every call succeeds
            with open(path) as f:
                on_disk = json.load(f)["podCIDR"]
            assert on_disk == in_use(), f"round {rnd}: file {on_disk}, in use {in_use()}"
    leftovers = [n for n in os.listdir(d.root) if ".tmp." in n]
    assert not leftovers
    before = in_use()
    assert d.stop() == 0
    d.start()
    assert in_use() == before


# ---- item 17: temporaries of dead writers ------------------------------------

def test_stale_record_temporaries_removed_at_start(cri, daemon_factory):
    d = daemon_factory(start=False)
    dead, live = dead_pid(), os.getpid()
    dirs = [d.root, os.path.join(d.root, "pods"), os.path.join(d.root, "containers")]
    for x in dirs:
        os.makedirs(x, exist_ok=True)
    rid = "a" * 64
    stale = [os.path.join(d.root, f"runtime-config.json.tmp.{dead}"),
             os.path.join(d.root, f"runtime-config.json.tmp.{dead}.3"),
             os.path.join(d.root, "pods", f"{rid}.json.tmp.{dead}"),
             os.path.join(d.root, "pods", f"{rid}.json.tmp.{dead}.0"),
             os.path.join(d.root, "containers", f"{rid}.json.tmp.{dead}.12")]
    kept = [os.path.join(d.root, "pods", f"{rid}.json.tmp.{live}.1"),  # a live writer's
            os.path.join(d.root, "pods", "notes.tmp.x")]                # not ours
    for p in stale + kept:
        with open(p, "w") as f:
            f.write('{"partial":')
    d.start()
    wait_for(lambda: runtime(cri, d).Version(cri.pb.VersionRequest(), timeout=5))
    wait_for(lambda: not any(os.path.exists(p) for p in stale), what="stale temporaries gone")
    for p in kept:
        assert os.path.exists(p)
        os.unlink(p)
    assert d.stop() == 0


# ---- item 19: modes of what the daemon creates -------------------------------

# Directories and files that others must read or traverse, and why: the
# pod's state directory and its namespace files are bind-mount sources
# (0711, 0444); hostname, hosts and resolv.conf are bind-mounted into
# containers whose processes may run as any user (0644); the containers'
# layer directory is traversed by overlayfs for non-root images (0711).
SHARED = [
    (r"state/pods/[0-9a-f]{64}", 0o711),
    (r"state/pods/[0-9a-f]{64}/ns", 0o711),
    (r"state/pods/[0-9a-f]{64}/ns/\w+", 0o444),
    (r"state/pods/[0-9a-f]{64}/(hostname|hosts|resolv\.conf)", 0o644),
    (r"state/pods", 0o711),
    (r"root/containers", 0o711),
]


def test_modes_of_everything_the_daemon_creates(cri, make_daemon):
    d = make_daemon(start=False)
    d.umask = 0o177  # a umask that once made <root>/net a directory without x
    # as an earlier version left them: repaired at start
    os.makedirs(os.path.join(d.root, "net", "ipam"))
    os.chmod(os.path.join(d.root, "net", "ipam"), 0o600)
    os.chmod(os.path.join(d.root, "net"), 0o600)
    d.start()
    pb = cri.pb
    rs = runtime(cri, d)
    rs.UpdateRuntimeConfig(pb.UpdateRuntimeConfigRequest(runtime_config=pb.RuntimeConfig(
        network_config=pb.NetworkConfig(pod_cidr="10.78.0.0/24"))), timeout=10)
    pid = run_pod(cri, rs, pod_config(cri, "modes", pid=pb.POD))
    seen, wrong = 0, []
    mounts = set(d.run("awk", "{print $5}", "/proc/self/mountinfo").stdout.split())
    for top in (d.root, d.state):
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [x for x in dirnames if os.path.join(dirpath, x) not in mounts]
            for name in dirnames + filenames:
                p = os.path.join(dirpath, name)
                st = os.lstat(p)
                if stat.S_ISLNK(st.st_mode) or stat.S_ISSOCK(st.st_mode):
                    continue
                rel = os.path.relpath(p, d.dir)
                mode = stat.S_IMODE(st.st_mode)
                want = next((m for pat, m in SHARED if re.fullmatch(pat, rel)),
                            0o700 if stat.S_ISDIR(st.st_mode) else 0o600)
                seen += 1
                if mode != want:
                    wrong.append(f"{rel}: {mode:o}, wanted {want:o}")
    assert not wrong, "\n".join(wrong)
    assert seen > 10
    assert stat.S_IMODE(os.stat(os.path.join(d.root, "net")).st_mode) == 0o700
    stop_remove(cri, rs, pid)
    assert d.stop() == 0


# ---- item 20: the default pod MTU --------------------------------------------

UPLINK = [
    ("ip", "link", "add", "up0", "mtu", "1400", "type", "veth", "peer", "name", "up1"),
    ("ip", "link", "set", "up1", "up"),
    ("ip", "link", "set", "up0", "up"),
    ("ip", "addr", "add", "192.0.2.2/24", "dev", "up0"),
    ("ip", "route", "add", "default", "via", "192.0.2.1"),
]


def pod_mtu(cri, d, name):
    rs = runtime(cri, d)
    pid = run_pod(cri, rs, pod_config(cri, name))
    st = rs.PodSandboxStatus(cri.pb.PodSandboxStatusRequest(pod_sandbox_id=pid, verbose=True),
                             timeout=10)
    netns = json.loads(st.info["info"])["netns"]
    # (ip, not /sys: sysfs shows the links of the namespace that mounted it)
    out = d.run("ip", "-o", "link", "show", "eth0", net=netns).stdout
    stop_remove(cri, rs, pid)
    return int(re.search(r" mtu (\d+) ", out).group(1))


@pytest.mark.parametrize("args, want", [((), 1400), (("--mtu", "1300"), 1300)])
def test_default_mtu_follows_the_uplink(cri, make_daemon, args, want):
    d = make_daemon(args, start=False)
    d.setup = UPLINK
    d.start()
    assert pod_mtu(cri, d, "mtu") == want
    if not args:
        assert "pod MTU 1400, the MTU of `up0`" in d.logtext()
    assert d.stop() == 0


def test_default_mtu_without_a_default_route(cri, pd):
    assert pod_mtu(cri, pd, "mtu") == 1500
    assert "pod MTU 1500 (no default route" in pd.logtext()
