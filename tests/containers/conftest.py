"""Fixtures for containers through the real gRPC client.

Every daemon runs in a network + mount namespace of its own (PodDaemon of
tests/cri), so pods, bridges, rules and mounts never reach the machine's.
Such a daemon cannot reach a registry on the machine's loopback, so the
test images are pulled once per session into a template store (by `kinglet
image pull` in the machine's namespace, from Debian's docker-registry), and
every daemon starts on a copy of it.
"""
import errno
import os
import pathlib
import shutil
import subprocess
import sys
import time
import uuid

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "image"))
import imagelib  # noqa: E402
from imagelib import Image, Tar, busybox_layer  # noqa: E402


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
pod_daemon_factory = _cri.pod_daemon_factory
channel = _cri.channel
vm_marks = _cri.vm_marks
wait_for = _cri.wait_for

def children_of(ppid):
    """The live processes (and zombies) whose parent is ppid: pid ->
    (state, comm, argv as a list of bytes)."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                comm, rest = f.read().rsplit(")", 1)
            fields = rest.split()
            if int(fields[1]) != ppid:
                continue
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")[:-1]
        except (OSError, ValueError, IndexError):
            continue
        out[int(p)] = (fields[0], comm.split("(", 1)[1], argv)
    return out


def exe_writable(pid):
    """Whether /proc/PID/exe can be opened for writing (what CVE-2019-5736
    does), and the filesystem it is on. Only a refusal that lasts counts (a
    read-only view, EROFS, or seals, EPERM): ETXTBSY, which any running
    binary gives, ends with the process, and counts as writable."""
    fstype = subprocess.run(["stat", "-L", "-f", "-c", "%T", f"/proc/{pid}/exe"],
                            capture_output=True, text=True).stdout.strip()
    try:
        with open(f"/proc/{pid}/exe", "r+b"):
            return True, fstype
    except OSError as e:
        if e.errno == errno.ETXTBSY:
            return True, fstype
        assert e.errno in (errno.EROFS, errno.EPERM), e
        return False, fstype


BUSYBOX_CONFIG = {"Cmd": ["/bin/sh"], "Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]}


def busybox_full_layer():
    """busybox with every applet linked, /etc files, and a few test users."""
    t = Tar().dir("bin").dir("etc").dir("tmp", mode=0o1777).dir("root", mode=0o700)
    with open(imagelib.BUSYBOX, "rb") as f:
        t.file("bin/busybox", f.read(), mode=0o755)
    out = subprocess.run([imagelib.BUSYBOX, "--list"], capture_output=True, text=True, check=True)
    for app in out.stdout.split():
        if app != "busybox":
            t.symlink("bin/" + app, "busybox")
    t.file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"
                         "app:x:1000:1000:app:/home/app:/bin/sh\n"
                         "nobody:x:65534:65534::/:/bin/sh\n")
    t.file("etc/group", "root:x:0:\napp:x:1000:\nextra:x:2000:app\nnogroup:x:65534:\n")
    return t.bytes()


def volume_layers():
    """The two layers of an image made to be an image volume (KEP-4639):
    data in both, and symlinks that stay in it or try to leave it."""
    low = (Tar().dir("data").dir("data/sub").file("data/sub/file", "one\n")
           .symlink("data/inside", "sub")          # stays in the image
           .symlink("data/out", "../../../../etc")  # leaves it through ..
           .symlink("data/abs", "/etc")             # absolute
           .bytes())
    top = (Tar().dir("data").dir("data/sub").file("data/sub/two", "two\n").file("top", "top\n")
           .bytes())
    return [(low, "gzip"), (top, "gzip")]


@pytest.fixture(scope="session")
def test_images():
    if not os.path.exists(imagelib.BUSYBOX):
        pytest.skip("busybox-static missing: scripts/install-deps test")
    bb = busybox_full_layer()
    return {
        "busybox": Image([(bb, "gzip")], config=dict(BUSYBOX_CONFIG)),
        "entrypoint": Image([(bb, "gzip")], config=dict(
            BUSYBOX_CONFIG, Entrypoint=["/bin/echo", "ep"], Cmd=["cmd1", "cmd2"],
            WorkingDir="/work/dir", User="app", StopSignal="SIGUSR1",
            Env=["PATH=/bin", "FROM_IMAGE=1", "OVERRIDE=image"])),
        "volume": Image(volume_layers(), config={}),
    }


@pytest.fixture(scope="session")
def template_root(tmp_path_factory, kinglet_bin, test_images):
    """An image store holding every test image, pulled once."""
    if not os.path.exists(imagelib.REGISTRY_BIN):
        pytest.skip("docker-registry missing: scripts/install-deps test")
    reg = imagelib.Registry(str(tmp_path_factory.mktemp("ctr-registry")), "plain").start()
    root = tmp_path_factory.mktemp("ctr-template") / "root"
    try:
        p = reg.pusher()
        refs = {}
        for name, img in test_images.items():
            p.push_image(name, "latest", img)
            refs[name] = f"{reg.host}/{name}:latest"
        subprocess.run([kinglet_bin, "image", "--root", str(root), "--insecure-registry",
                        reg.host, "pull", "--quiet", *refs.values()], check=True,
                       capture_output=True, timeout=300)
    finally:
        reg.stop()
    return root, refs


class Env:
    """A daemon in namespaces of its own with the test images, and the stubs
    to drive it."""

    def __init__(self, cri, daemon, refs, cgroup_parent):
        self.pb = cri.pb
        self.cri = cri
        self.d = daemon
        self.refs = refs
        self.cgroup_parent = cgroup_parent
        self.rs = cri.grpc.RuntimeServiceStub(channel(daemon))
        self.ims = cri.grpc.ImageServiceStub(channel(daemon))
        self.logdir = pathlib.Path(daemon.dir) / "logs"

    def pod(self, name="p", pid=None, net=None, ipc=None, timeout=60, **kw):
        pb = self.pb
        ns = pb.NamespaceOption(network=net if net is not None else pb.POD,
                                pid=pid if pid is not None else pb.CONTAINER,
                                ipc=ipc if ipc is not None else pb.POD)
        uid = uuid.uuid4().hex
        logdir = self.logdir / uid
        cfg = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, namespace="default", uid=uid),
            hostname=name, log_directory=str(logdir),
            linux=pb.LinuxPodSandboxConfig(
                cgroup_parent=self.cgroup_parent,
                security_context=pb.LinuxSandboxSecurityContext(namespace_options=ns)),
            **kw)
        pid_ = self.rs.RunPodSandbox(pb.RunPodSandboxRequest(config=cfg),
                                     timeout=timeout).pod_sandbox_id
        return pid_, cfg

    def config(self, name, image="busybox", command=None, args=None, attempt=0, **kw):
        pb = self.pb
        return pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name, attempt=attempt),
            image=pb.ImageSpec(image=self.refs[image]), command=command or [], args=args or [],
            log_path=f"{name}/{attempt}.log", **kw)

    def create(self, pod, cfg, ccfg):
        pod_id, pcfg = pod
        return self.rs.CreateContainer(self.pb.CreateContainerRequest(
            pod_sandbox_id=pod_id, config=ccfg, sandbox_config=pcfg), timeout=60).container_id

    def start(self, cid):
        self.rs.StartContainer(self.pb.StartContainerRequest(container_id=cid), timeout=60)

    def run(self, pod, name, command, **kw):
        cid = self.create(pod, None, self.config(name, command=command, **kw))
        self.start(cid)
        return cid

    def status(self, cid, verbose=False):
        return self.rs.ContainerStatus(self.pb.ContainerStatusRequest(
            container_id=cid, verbose=verbose), timeout=10)

    def wait_exited(self, cid, timeout=60):
        pb = self.pb
        return wait_for(lambda: (lambda s: s if s.state == pb.CONTAINER_EXITED else None)(
            self.status(cid).status), timeout=timeout, what=f"container {cid[:12]} to exit")

    def stop(self, cid, timeout=0):
        self.rs.StopContainer(self.pb.StopContainerRequest(container_id=cid, timeout=timeout),
                              timeout=timeout + 30)

    def remove(self, cid):
        self.rs.RemoveContainer(self.pb.RemoveContainerRequest(container_id=cid), timeout=60)

    def kill9_restart(self):
        """SIGKILL the daemon and start it again on the same directories."""
        self.kill9()
        self.restart()

    def kill9(self):
        import signal as sig
        self.d.proc.send_signal(sig.SIGKILL)
        self.d.proc.wait()

    def restart(self):
        self.d.log.close()
        self.d.start()
        self.rs = self.cri.grpc.RuntimeServiceStub(channel(self.d))
        self.ims = self.cri.grpc.ImageServiceStub(channel(self.d))

    def monitors(self):
        """pids of the monitors of this daemon's containers (their command
        line names the test's own cgroup parent)."""
        out = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if cmd.startswith(b"kinglet-monitor\0") and self.cgroup_parent.encode() in cmd:
                out.append(int(p))
        return out

    def bundle(self, cid):
        return os.path.join(self.d.state, "containers", cid)

    def cgroup_dir(self, cid):
        import json
        info = json.loads(self.status(cid, verbose=True).info["info"])
        path = info["cgroupPath"]
        # a sibling of the sandbox's own cgroup, below the pod's parent
        assert path.endswith(self.cgroup_parent + "/" + cid), path
        return path

    def wait_procs(self, cid, n, timeout=60):
        """Waits until the container's cgroup holds at least n processes (a
        script has reached its second command)."""
        path = self.cgroup_dir(cid) + "/cgroup.procs"
        return wait_for(lambda: len(open(path).read().split()) >= n, timeout=timeout,
                        what=f"{n} processes in container {cid[:12]}")

    def list(self, **filt):
        f = self.pb.ContainerFilter(**filt) if filt else None
        return self.rs.ListContainers(self.pb.ListContainersRequest(filter=f), timeout=10).containers


def clone_exited(env, cid, n, edit=None):
    """n exited containers made cheaply while the daemon is down (it must
    be): the record of the exited container cid cloned with new ids and
    names, as recovery finds records at start. The clones hold nothing but
    their record. edit(cfg, i) may change each clone's ContainerConfig.
    Returns the new ids."""
    import base64
    import json
    assert env.d.proc.poll() is not None, "the daemon must be down"
    records = os.path.join(env.d.root, "containers")
    with open(os.path.join(records, cid + ".json")) as f:
        rec = json.load(f)
    cfg = env.pb.ContainerConfig.FromString(base64.b64decode(rec["config"]))
    ids = []
    for i in range(n):
        new = uuid.uuid4().hex + uuid.uuid4().hex
        cfg.metadata.name = f"c{i}"
        if edit:
            edit(cfg, i)
        rec["id"] = new
        rec["config"] = base64.b64encode(cfg.SerializeToString()).decode()
        with open(os.path.join(records, new + ".json"), "w") as f:
            json.dump(rec, f)
        ids.append(new)
    return ids


def unclone(env, ids):
    """Removes the records of clone_exited (with the daemon down) that are
    still there."""
    records = os.path.join(env.d.root, "containers")
    for new in ids:
        try:
            os.unlink(os.path.join(records, new + ".json"))
        except FileNotFoundError:
            pass  # removed by the test


@pytest.fixture
def cgroup_parent():
    """A cgroup parent of the test's own, removed afterwards."""
    root = "/sys/fs/cgroup/unified"
    if not os.path.exists(root + "/cgroup.procs"):
        root = "/sys/fs/cgroup"
    name = os.environ["KINGLET_TEST_CGROUP"] + "/kinglet-test-" + uuid.uuid4().hex[:8]
    path = os.path.join(root, name)
    yield "/" + name
    if os.path.isdir(path):
        for sub in sorted((os.path.join(dp, x) for dp, dns, _ in os.walk(path) for x in dns),
                          key=len, reverse=True):
            os.rmdir(sub)
        os.rmdir(path)


def stream_ids(call):
    """The ids of every item of a list stream, read to its end."""
    return [item.id for chunk in call for item in getattr(chunk, chunk.DESCRIPTOR.fields[0].name)]


def env_cleanup(e):
    """Pods and containers go with the daemon's own calls, so that a test
    failure leaves no process, mount or cgroup behind; then the daemon
    stops. The lists are streamed: no count of containers makes a stream
    too large, as it does the unary ListContainers answer (past the
    client's 4 MiB, and the daemon's 16 MiB), which left every container
    running."""
    if e.d.proc.poll() is not None:
        return
    pb = e.pb
    for cid in stream_ids(e.rs.StreamContainers(pb.StreamContainersRequest(), timeout=120)):
        e.remove(cid)
    for pid in stream_ids(e.rs.StreamPodSandboxes(pb.StreamPodSandboxesRequest(), timeout=60)):
        e.rs.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=pid), timeout=60)
        e.rs.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=pid), timeout=60)
    rc = e.d.stop()
    # a sanitizer's report (leaks at exit included) fails here
    assert rc == 0, f"daemon exited with {rc}:\n{e.d.logtext()[-4000:]}"


@pytest.fixture
def env_factory(cri, pod_daemon_factory, template_root, cgroup_parent):
    root, refs = template_root
    made = []

    def make(extra_args=()):
        d = pod_daemon_factory(extra_args=extra_args, start=False)
        shutil.copytree(root, d.root, symlinks=True)
        d.start()
        e = Env(cri, d, refs, cgroup_parent)
        made.append(e)
        return e
    yield make
    errors = []
    for e in made:
        try:
            env_cleanup(e)
        except Exception as ex:  # every env is cleaned before the first failure is raised
            errors.append(ex)
    if errors:
        raise errors[0]


@pytest.fixture
def env(env_factory):
    return env_factory()
