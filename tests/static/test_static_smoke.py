"""The static binary on a root filesystem that holds nothing but itself.

KINGLET_STATIC_BIN names the binary (`./bootstrap static` builds it; this
test builds nothing). The daemon runs chrooted into a tmpfs that holds only
the binary, CA certificates and the test's own files (/etc/hosts, the test
CA in the certs.d tree; no /usr, no /lib, no shell, no /etc/nsswitch.conf:
any shared library, NSS module or helper program it needed would be
missing), in
a network and mount namespace of the test's own, with pod networking on.
A docker-registry over HTTPS with a test CA runs in the same network
namespace (outside the chroot). Through the real gRPC client: the daemon
pulls busybox, runs a pod and a container, ExecSync into it, its log is
read, and everything is stopped and removed; then nothing of the test may
be left: no process in its namespaces, no cgroup, no mount.
"""
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import uuid

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "image"))
import imagelib  # noqa: E402

STATIC_BIN = os.environ.get("KINGLET_STATIC_BIN")


def _load_cri_conftest():
    import importlib.util
    if "cri_conftest" in sys.modules:
        return sys.modules["cri_conftest"]
    spec = importlib.util.spec_from_file_location("cri_conftest", HERE.parent / "cri" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["cri_conftest"] = mod
    spec.loader.exec_module(mod)
    return mod


_cri = _load_cri_conftest()
cri = _cri.cri
wait_for = _cri.wait_for

pytestmark = [
    pytest.mark.skipif(not STATIC_BIN, reason="KINGLET_STATIC_BIN is not set: build the static "
                       "binary with ./bootstrap static and point KINGLET_STATIC_BIN at it "
                       "(./bootstrap check does both)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, chroot, mounts)"),
]

# The CA bundles a distribution keeps (Debian, Fedora/RHEL, Alpine/BSDs): the
# first that exists here goes into the root as Debian's path.
SYSTEM_CA = ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
             "/etc/ssl/cert.pem"]

# Builds the root on a tmpfs and execs the daemon chrooted into it. Runs in
# the holder's namespaces (nsenter execs it: its pid is the daemon's).
ROOT_SCRIPT = textwrap.dedent("""\
    set -eu
    r=$1; bin=$2; ca=$3; cadest=$4; sysca=$5; sockdir=$6
    mount -t tmpfs -o mode=0755,size=512m kinglet-static-root "$r"
    mkdir -p "$r/etc" "$r/proc" "$r/sys" "$r/dev" "$r/run/kinglet" "$r/tmp" \\
        "$r/var/lib/kinglet" "$r/logs" "$r$(dirname "$cadest")"
    cp "$bin" "$r/kinglet"
    cp "$ca" "$r$cadest"
    if [ -n "$sysca" ]; then
        mkdir -p "$r/etc/ssl/certs"
        cp "$sysca" "$r/etc/ssl/certs/ca-certificates.crt"
    fi
    echo "127.0.0.1 localhost" >"$r/etc/hosts"
    mount -t proc proc "$r/proc"
    mount --rbind /sys "$r/sys"
    mount --rbind /dev "$r/dev"
    mount --bind "$sockdir" "$r/run/kinglet"
    exec chroot "$r" /kinglet daemon --socket /run/kinglet/kinglet.sock \\
        --root /var/lib/kinglet --state /run/kinglet/state --log-level debug
""")

PUSH_SCRIPT = textwrap.dedent("""\
    import os, sys
    # tests/image (imagelib) and tests (waiting)
    sys.path[:0] = [sys.argv[1], os.path.dirname(sys.argv[1])]
    from imagelib import Image, busybox_layer, Pusher
    from waiting import wait_for
    import ssl
    ctx = ssl.create_default_context(cafile=sys.argv[3])
    port = int(sys.argv[2])

    def up():
        try:
            return Pusher("127.0.0.1", port, ctx, None).request("GET", "/v2/")[0] == 200
        except OSError:
            return False
    wait_for(up, interval=0.05, what="the registry to come up")
    img = Image([(busybox_layer(), "gzip")],
                config={"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]})
    Pusher("127.0.0.1", port, ctx, None).push_image("busybox", "latest", img)
""")


def _ns_procs(holder_pid):
    """pids of processes in the holder's mount namespace, but the holder."""
    try:
        ns = os.readlink(f"/proc/{holder_pid}/ns/mnt")
    except OSError:
        return []
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != holder_pid:
            try:
                if os.readlink(f"/proc/{p}/ns/mnt") == ns:
                    out.append(int(p))
            except OSError:
                pass
    return out


@pytest.fixture
def cgroup_parent():
    root = "/sys/fs/cgroup/unified"
    if not os.path.exists(root + "/cgroup.procs"):
        root = "/sys/fs/cgroup"
    name = os.environ["KINGLET_TEST_CGROUP"] + "/kinglet-test-static-" + uuid.uuid4().hex[:8]
    yield "/" + name, os.path.join(root, name)
    path = os.path.join(root, name)
    if os.path.isdir(path):
        # What a failed run left (a pod init outliving a daemon that died):
        # killed through its cgroup, which only this test's processes are in.
        for d in sorted((os.path.join(dp, x) for dp, dns, _ in os.walk(path) for x in dns),
                        key=len, reverse=True) + [path]:
            if open(os.path.join(d, "cgroup.procs")).read().strip():
                with open(os.path.join(d, "cgroup.kill"), "w") as f:
                    f.write("1")
                wait_for(lambda: "populated 0" in open(os.path.join(d, "cgroup.events")).read(),
                         what=f"the processes of {d} to die")
            os.rmdir(d)


@pytest.fixture
def lab(tmp_path):
    """The holder of a network + mount namespace, a TLS registry in it, and
    the pushed busybox image; all of it stopped and checked gone afterwards."""
    for path, pkg in ((imagelib.REGISTRY_BIN, "docker-registry"),
                      (imagelib.BUSYBOX, "busybox-static")):
        if not os.path.exists(path):
            pytest.skip(f"{path} missing: install the Debian package {pkg}")
    holder = subprocess.Popen(
        ["unshare", "--net", "--mount", "--propagation", "private", "--", "sh", "-c",
         "ip link set lo up && echo ready && exec cat"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    procs = []
    try:
        assert holder.stdout.readline().strip() == b"ready", "could not make the namespaces"
        enter = ["nsenter", f"--net=/proc/{holder.pid}/ns/net", f"--mount=/proc/{holder.pid}/ns/mnt"]
        reg = imagelib.Registry(str(tmp_path / "registry"), "tls")
        reglog = open(tmp_path / "registry.log", "wb")
        regproc = subprocess.Popen([*enter, imagelib.REGISTRY_BIN, "serve", reg.config],
                                   stdout=reglog, stderr=subprocess.STDOUT)
        procs.append(regproc)
        subprocess.run([*enter, sys.executable, "-c", PUSH_SCRIPT, str(HERE.parent / "image"),
                        str(reg.port), f"{reg.pki}/ca.crt"], check=True, timeout=120)
        yield {"holder": holder, "enter": enter, "registry": reg, "tmp": tmp_path,
               "procs": procs}
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        left = _ns_procs(holder.pid)
        holder.stdin.close()
        holder.wait(10)
        assert not left, f"processes left in the test's namespaces: {left}"


@pytest.mark.parametrize("ca_by", ["certs-dir", "system-bundle"])
def test_smoke_in_empty_root(lab, cri, cgroup_parent, ca_by):
    """ca_by: where the test CA is: the registry's certs.d entry (next to the
    machine's CA bundle at Debian's path), or, with no certs.d entry and no
    Debian bundle, Fedora's system bundle (/etc/pki/tls/certs/ca-bundle.crt):
    found among the usual places."""
    pb = cri.pb
    tmp = lab["tmp"]
    reg = lab["registry"]
    # by name: resolved from the root's /etc/hosts by c-ares, not glibc's NSS
    host = f"localhost:{reg.port}"
    if ca_by == "certs-dir":
        cadest = f"/etc/kinglet/certs.d/{host}/ca.crt"
        sysca = next((p for p in SYSTEM_CA if os.path.exists(p)), "")
    else:
        cadest, sysca = "/etc/pki/tls/certs/ca-bundle.crt", ""
    sockdir = tmp / "sock"
    sockdir.mkdir()
    rootdir = tmp / "root"
    rootdir.mkdir()
    log = open(tmp / "daemon.log", "wb")
    d = subprocess.Popen([*lab["enter"], "sh", "-c", ROOT_SCRIPT, "root-script", str(rootdir),
                          STATIC_BIN, f"{reg.pki}/ca.crt", cadest, sysca, str(sockdir)],
                         stdout=log, stderr=log,
                         # nothing from the test's environment (SSL_CERT_FILE...)
                         env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    lab["procs"].append(d)
    sock = str(sockdir / "kinglet.sock")

    def logtext():
        return (tmp / "daemon.log").read_text(errors="replace")[-4000:]

    def connectable():
        assert d.poll() is None, f"daemon exited with {d.returncode}:\n{logtext()}"
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(sock)
            return True
        except OSError:
            return False
        finally:
            s.close()

    wait_for(connectable, timeout=60, what="the static daemon's socket")
    # nothing but what the test put there: the daemon's view of /
    view = sorted(os.listdir(f"/proc/{d.pid}/root"))
    assert view == ["dev", "etc", "kinglet", "logs", "proc", "run", "sys", "tmp", "var"], view
    assert not os.path.exists(f"/proc/{d.pid}/root/usr")
    assert not os.path.exists(f"/proc/{d.pid}/root/lib")
    with open(f"/proc/{d.pid}/maps") as f:
        maps = f.read()
    assert ".so" not in maps, "the static daemon mapped a shared object:\n" + maps

    import grpc
    ch = grpc.insecure_channel("unix://" + sock, options=[("grpc.use_local_subchannel_pool", 1)])
    rs = cri.grpc.RuntimeServiceStub(ch)
    ims = cri.grpc.ImageServiceStub(ch)
    try:
        ref = f"{host}/busybox:latest"
        img = ims.PullImage(pb.PullImageRequest(image=pb.ImageSpec(image=ref)), timeout=120)
        assert img.image_ref.startswith("sha256:"), img

        uid = uuid.uuid4().hex
        pcfg = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name="static", namespace="default", uid=uid),
            hostname="static", log_directory=f"/logs/{uid}",
            linux=pb.LinuxPodSandboxConfig(
                cgroup_parent=cgroup_parent[0],
                # what kubelet asks for a pod without shareProcessNamespace
                security_context=pb.LinuxSandboxSecurityContext(namespace_options=pb.NamespaceOption(
                    network=pb.POD, pid=pb.CONTAINER, ipc=pb.POD))))
        pod = rs.RunPodSandbox(pb.RunPodSandboxRequest(config=pcfg), timeout=60).pod_sandbox_id
        st = rs.PodSandboxStatus(pb.PodSandboxStatusRequest(pod_sandbox_id=pod), timeout=10)
        assert st.status.network.ip, "the pod got no address from pod networking"

        ccfg = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name="c"), image=pb.ImageSpec(image=ref),
            command=["/bin/sh", "-c", "echo hello from the static runtime; exec sleep 300"],
            log_path="c/0.log")
        cid = rs.CreateContainer(pb.CreateContainerRequest(
            pod_sandbox_id=pod, config=ccfg, sandbox_config=pcfg), timeout=60).container_id
        rs.StartContainer(pb.StartContainerRequest(container_id=cid), timeout=60)

        r = rs.ExecSync(pb.ExecSyncRequest(container_id=cid, cmd=["/bin/sh", "-c",
                                                                  "hostname; exit 3"],
                                           timeout=20), timeout=30)
        assert (r.exit_code, r.stdout) == (3, b"static\n"), r

        logfile = f"/proc/{d.pid}/root/logs/{uid}/c/0.log"
        try:
            wait_for(lambda: os.path.exists(logfile) and
                     "hello from the static runtime" in open(logfile).read(),
                     what="the container's log line")
        except AssertionError:
            tree = [os.path.join(dp, f) for dp, _, fs in os.walk(f"/proc/{d.pid}/root/logs")
                    for f in fs]
            raise AssertionError(f"no log line in {logfile}; files: {tree}; "
                                 f"{open(logfile).read() if os.path.exists(logfile) else ''}")
        line = open(logfile).read().splitlines()[0]
        assert line.split(" ", 3)[1:] == ["stdout", "F", "hello from the static runtime"], line

        rs.StopContainer(pb.StopContainerRequest(container_id=cid, timeout=0), timeout=30)
        rs.RemoveContainer(pb.RemoveContainerRequest(container_id=cid), timeout=30)
        rs.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=pod), timeout=60)
        rs.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=pod), timeout=60)
        ims.RemoveImage(pb.RemoveImageRequest(image=pb.ImageSpec(image=ref)), timeout=30)
        assert not rs.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items
    finally:
        if d.poll() is None:
            # after a failure: what is left goes through the daemon's own calls
            try:
                for c in rs.ListContainers(pb.ListContainersRequest(), timeout=10).containers:
                    rs.RemoveContainer(pb.RemoveContainerRequest(container_id=c.id), timeout=60)
                for p in rs.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items:
                    rs.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=p.id), timeout=60)
                    rs.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=p.id),
                                        timeout=60)
            except grpc.RpcError:
                pass
        ch.close()
        if d.poll() is None:
            d.send_signal(signal.SIGTERM)
            try:
                d.wait(20)
            except subprocess.TimeoutExpired:
                d.kill()
                d.wait()
                raise AssertionError("the static daemon did not stop on SIGTERM")
        log.close()
    assert d.returncode == 0, f"daemon exited with {d.returncode}:\n{logtext()}"
    # Nothing left: no process in the namespaces (the lab fixture checks it
    # once the registry is gone too), no container cgroup, no socket.
    wait_for(lambda: not [p for p in _ns_procs(lab["holder"].pid) if p != lab["procs"][0].pid],
             timeout=10, what="the daemon's monitors and containers to exit")
    path = cgroup_parent[1]
    assert not os.path.isdir(path) or not [x for x in os.listdir(path)
                                          if os.path.isdir(os.path.join(path, x))], \
        f"cgroups left below {path}: {os.listdir(path)}"
    assert not os.path.exists(sock), "the daemon left its socket"
