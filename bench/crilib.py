"""What the CRI benchmarks (sandbox-bench, container-bench) share: running
the benchmark in namespaces of its own and cleaning up after it, the client
stubs, the images served from a local registry, and starting and stopping
kinglet and containerd + runc + CNI on private directories and sockets.

The split between host and namespaces:
  - on the host (`run_isolated`): packages, kinglet, the grpcio stubs
    (tests/gen-stubs fetches upstream's proto once; the benchmark's own
    network namespace has no route to Debian's archive), one work
    directory, and afterwards the cleanup: every process left in the
    benchmark's network namespace, the cgroup parents in every hierarchy
    (runc makes them in each cgroup v1 one), the work directory;
  - in a new network + mount namespace: the registry, both daemons, the
    pods. /run is a tmpfs there (containerd's and runc's state, the pods'
    namespace files), and /var/lib an overlay whose writes land in the
    work directory (libcni caches every pod's result in /var/lib/cni,
    which containerd gives no way to move). containerd's `opt` plugin,
    which would create /opt/containerd, is disabled, and TMPDIR points into
    the work directory.
"""
import json
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
SRC = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(SRC / "tests" / "image"))
sys.path.insert(0, str(SRC / "tests"))  # tests/waiting.py, which imagelib uses
import benchlib  # noqa: E402

WORK_ENV = "KINGLET_BENCH_WORK"


# ---- figures ---------------------------------------------------------------------

def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def med_p99(xs):
    return statistics.median(xs), percentile(xs, 99)


# ---- host side: namespaces and cleanup ---------------------------------------------

def netns_of(pid):
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def pids_in_netns(netns):
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid() and netns_of(pid) == netns:
            out.append(int(pid))
    return out


def kill_netns(netns):
    """SIGKILLs every process left in the benchmark's network namespace:
    only the benchmark starts processes there (its daemons, their monitors
    and shims, the registry)."""
    for pid in pids_in_netns(netns):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_isolated(name, script, args, cgroups, sets=("test", "bench"), kinglet=None):
    """On the host: prepares what the benchmark needs, runs `script ARGS
    --kinglet PATH` in a network + mount namespace of its own with
    $KINGLET_BENCH_WORK set (stubs in WORK/stubs), and cleans up after it,
    also when interrupted (SIGINT, SIGTERM, SIGHUP). `cgroups` are the
    cgroup parents the benchmark uses. Returns the exit status."""
    kinglet = benchlib.prepare(name, list(sets), kinglet)
    work = pathlib.Path(tempfile.mkdtemp(prefix=name + "-"))
    netns, rc, p = None, 1, None
    mine = netns_of(os.getpid())

    got = []

    def interrupted(signum, frame):
        got.append(signum)
        raise KeyboardInterrupt
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, interrupted)
    try:
        subprocess.run([str(SRC / "tests" / "gen-stubs"), str(work / "stubs")], check=True,
                       stdout=subprocess.DEVNULL)
        for d in ("tmp", "varlib/upper", "varlib/work"):
            (work / d).mkdir(parents=True)
        env = dict(os.environ, **{WORK_ENV: str(work), "TMPDIR": str(work / "tmp")})
        setup = ('ip link set lo up && mount -t tmpfs bench-run /run && mkdir -p /run/netns && '
                 f'mount -t overlay -o lowerdir=/var/lib,upperdir={work}/varlib/upper,'
                 f'workdir={work}/varlib/work bench-varlib /var/lib && exec "$@"')
        cmd = ["unshare", "--net", "--mount", "--propagation", "private", "--",
               "sh", "-c", setup, "sh", sys.executable, str(script), *args, "--kinglet", kinglet]
        p = subprocess.Popen(cmd, env=env)
        deadline = time.monotonic() + 30
        while p.poll() is None and time.monotonic() < deadline:
            ns = netns_of(p.pid)
            if ns and ns != mine:
                netns = ns
                break
            time.sleep(0.005)
        try:
            rc = p.wait()
        except KeyboardInterrupt:
            # A Ctrl-C reached the benchmark too (same process group); a
            # SIGTERM or SIGHUP sent to us is passed on. Either way it
            # stops its pods and daemons itself, which we wait for.
            if got and got[-1] != signal.SIGINT:
                p.send_signal(signal.SIGTERM)
            try:
                rc = p.wait(120)
            except (subprocess.TimeoutExpired, KeyboardInterrupt):
                pass
            rc = 130
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        if p and netns is None and netns_of(p.pid) not in (None, mine):
            netns = netns_of(p.pid)
        if p and p.poll() is None:
            p.kill()
            p.wait()
        if netns:
            for _ in range(100):  # killed processes can fork no more; repeat until none
                if not pids_in_netns(netns):
                    break
                kill_netns(netns)
                time.sleep(0.02)
        benchlib.remove_cgroups(cgroups)
        subprocess.run(["rm", "-rf", "--one-file-system", str(work)], check=False)
        left = [str(work)] if work.exists() else []
        left += [f"process {pid}" for pid in (pids_in_netns(netns) if netns else [])]
        left += [os.path.join(m, c.strip("/")) for m in benchlib.cgroup_mounts() for c in cgroups
                 if os.path.isdir(os.path.join(m, c.strip("/")))]
        if left:
            print(f"{name}: LEFT BEHIND: {', '.join(left)}", file=sys.stderr)
            rc = rc or 1
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
    return rc


def isolated_work():
    """In the namespaces: the work directory, with the stubs importable;
    None on the host."""
    work = os.environ.get(WORK_ENV)
    if not work:
        return None
    sys.path.insert(0, os.path.join(work, "stubs"))
    return pathlib.Path(work)


# ---- images --------------------------------------------------------------------------

def pause_layer():
    """busybox-static as `sleep`, all a pause container needs."""
    from imagelib import BUSYBOX, Tar
    t = Tar().dir("bin").dir("etc")
    with open(BUSYBOX, "rb") as f:
        t.file("bin/busybox", f.read(), mode=0o755)
    t.symlink("bin/sleep", "busybox")
    return t.bytes()


def push_images(reg):
    """Builds and pushes the pause image (containerd's sandbox image) and a
    busybox image (sh, true, sleep, ...); returns their references."""
    from imagelib import Image, busybox_layer
    p = reg.pusher()
    pause = Image([(pause_layer(), "gzip")], config={
        "Entrypoint": ["/bin/sleep", "2147483647"], "Env": ["PATH=/bin"]})
    busybox = Image([(busybox_layer(), "gzip")], config={
        "Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]})
    p.push_image("pause", "bench", pause)
    p.push_image("busybox", "bench", busybox)
    return {"pause": f"{reg.host}/pause:bench", "busybox": f"{reg.host}/busybox:bench"}


# ---- daemons -------------------------------------------------------------------------

def wait_socket(path, proc, log, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited:\n{pathlib.Path(log).read_text()[-3000:]}")
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            return
        except OSError:
            time.sleep(0.05)
        finally:
            s.close()
    raise RuntimeError(f"no socket {path}")


# A daemon's own mount namespace (a copy of the benchmark's): the mounts of
# its pods stay out of the other daemon's /proc/self/mountinfo and out of the
# mount table its containers' namespaces copy, as on a node with one runtime.
OWN_MOUNTS = ["unshare", "--mount", "--propagation", "private", "--"]


def start_containerd(d, sandbox_image, subnet="10.98.0.0/16", state=None, own_mounts=False):
    """containerd 1.6 + CRI plugin + runc (io.containerd.runc.v2), overlayfs,
    Debian's CNI plugins (bridge cni0 + host-local + portmap), its root and
    sockets under d, its state in `state` (default d/state; in production
    it is on /run, a tmpfs); the registry of `sandbox_image` over plain
    HTTP. With own_mounts, in a mount namespace of its own. Returns (proc,
    socket path, log path)."""
    d = pathlib.Path(d)
    state = state or d / "state"
    (d / "cni").mkdir(parents=True)
    (d / "cni" / "10-bench.conflist").write_text(json.dumps({
        "cniVersion": "1.0.0", "name": "bench",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]],
                      "routes": [{"dst": "0.0.0.0/0"}],
                      "dataDir": str(d / "ipam")}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ]}))
    host = sandbox_image.split("/")[0]
    (d / "config.toml").write_text(f'''version = 2
root = "{d}/root"
state = "{state}"
# would create /opt/containerd on the host; nothing here installs into it
disabled_plugins = ["io.containerd.internal.v1.opt"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[debug]
  level = "error"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  # no CAP_SYS_RESOURCE on these machines: the sandbox's -998 would fail
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."{host}"]
    endpoint = ["http://{host}"]
''')
    log = d / "containerd.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([*(OWN_MOUNTS if own_mounts else []),
                                 "containerd", "--config", str(d / "config.toml")],
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    wait_socket(str(d / "containerd.sock"), proc, log)
    return proc, str(d / "containerd.sock"), log


def start_kinglet(binary, d, *extra, state=None, own_mounts=False):
    """kinglet's daemon with its root, state and socket under d. Both
    daemons run in a session of their own, so that a Ctrl-C reaches the
    benchmark only, which removes its pods and then stops them. Its state
    goes to `state` (default d/state; in production it is on /run). With
    own_mounts, in a mount namespace of its own."""
    d = pathlib.Path(d)
    state = state or d / "state"
    d.mkdir(parents=True)
    log = d / "kinglet.log"
    sock = d / "kinglet.sock"
    with open(log, "wb") as f:
        proc = subprocess.Popen([*(OWN_MOUNTS if own_mounts else []),
                                 binary, "daemon", "--socket", str(sock), "--root", str(d / "root"),
                                 "--state", str(state), "--log-level", "error", *extra],
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    wait_socket(str(sock), proc, log)
    return proc, str(sock), log


def stop(proc, timeout=30):
    """SIGTERM, then SIGKILL after `timeout` s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- memory --------------------------------------------------------------------------

def mem_kb(pid):
    """(VmRSS, Pss) of a process in kB; (0, 0) once it is gone."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss
