"""Fixtures for driving a real kinglet daemon through real clients.

`cri` gives grpcio stubs generated from the UPSTREAM cri-api proto (see
tests/gen-stubs), so the client never shares our own definition. `Daemon`
starts the binary on a private socket and directories and stops it by PID.
"""
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import types

import pytest

from waiting import wait_for  # noqa: F401 (the tests import it from here)

SRCDIR = pathlib.Path(__file__).resolve().parent.parent.parent


@pytest.fixture(scope="session")
def cri(tmp_path_factory):
    out = tmp_path_factory.mktemp("stubs")
    subprocess.run([str(SRCDIR / "tests" / "gen-stubs"), str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    sys.path.insert(0, str(out))
    import api_pb2
    import api_pb2_grpc
    return types.SimpleNamespace(pb=api_pb2, grpc=api_pb2_grpc)


_tsan = {}


def tsan_build(binary):
    """Whether binary is a ThreadSanitizer build (configure --enable-tsan)."""
    if binary not in _tsan:
        with open(binary, "rb") as f:
            _tsan[binary] = b"ThreadSanitizer" in f.read()
    return _tsan[binary]


class Daemon:
    # Daemons of these tests run in the machine's own network namespace: they
    # must not build pod networking there (bridge, nftables, sysctls). Tests
    # of pods use PodDaemon, which runs in namespaces of its own.
    default_args = ("--pod-network", "none")
    prefix = ()

    def __init__(self, binary, workdir, extra_args=()):
        self.binary = binary
        self.dir = pathlib.Path(workdir)
        self.sock = str(self.dir / "kinglet.sock")
        self.root = str(self.dir / "root")
        self.state = str(self.dir / "state")
        self.log_path = self.dir / "daemon.log"
        self.extra_args = list(extra_args)
        self.proc = None

    @property
    def pid(self):
        return self.proc.pid

    def args(self):
        return [*self.prefix, self.binary, "daemon", "--socket", self.sock, "--root", self.root,
                "--state", self.state, "--log-level", "debug", *self.default_args,
                *self.extra_args]

    umask = None  # the umask the daemon inherits (None: the test's)

    def start(self, wait=True, pass_fds=()):
        self.log = open(self.log_path, "ab")
        mask = self.umask
        self.proc = subprocess.Popen(self.args(), stdout=self.log, stderr=self.log,
                                     pass_fds=pass_fds,
                                     preexec_fn=(lambda: os.umask(mask)) if mask is not None
                                     else None)
        if wait:
            wait_for(self.connectable, what="the daemon's socket")
        return self

    def connectable(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{self.logtext()}")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(self.sock)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def logtext(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def connections(self):
        """Client connections the daemon holds: its sockets connected to a
        peer (the unix sockets of its network namespace, /proc/PID/net/unix,
        whose state is connected and that do not listen)."""
        mine = set()
        for fd in self.fds():
            try:
                target = os.readlink(f"/proc/{self.pid}/fd/{fd}")
            except FileNotFoundError:
                continue
            if target.startswith("socket:["):
                mine.add(target[8:-1])
        n = 0
        with open(f"/proc/{self.pid}/net/unix") as f:
            next(f)
            for line in f:
                cols = line.split()
                # Flags 00010000: listening; St 03: connected.
                if (cols[6] in mine and int(cols[3], 16) & 0x10000 == 0 and cols[5] == "03"
                        and len(cols) > 7 and cols[7] in (self.sock, self.sock + "." + str(self.pid))):
                    n += 1
        return n

    def settled_fds(self, timeout=60):
        """fd_targets() once the connections of earlier probes (and calls)
        are closed: waits until the daemon holds no client connection."""
        wait_for(lambda: self.connections() == 0, timeout=timeout,
                 what="the daemon to close the connections of earlier probes")
        return self.fd_targets()

    def fds(self):
        """The daemon's descriptors, without the log a sanitizer build
        opens at its first report (tests/conftest.py reads that log)."""
        reports = os.path.dirname(os.environ.get("KINGLET_MONITOR_REPORT", "/-")) + "/"
        out = []
        for fd in os.listdir(f"/proc/{self.pid}/fd"):
            try:
                if not os.readlink(f"/proc/{self.pid}/fd/{fd}").startswith(reports):
                    out.append(fd)
            except OSError:
                pass  # closed meanwhile
        return sorted(out, key=int)

    def fd_targets(self):
        """fds(), each with what it points at."""
        out = {}
        for fd in self.fds():
            try:
                out[fd] = os.readlink(f"/proc/{self.pid}/fd/{fd}")
            except OSError:
                pass  # closed meanwhile
        return out

    def wait_fds_back(self, before, what="the daemon's fds to settle", timeout=60.0):
        """Waits until the daemon holds no more fds than before (a
        fd_targets()); fails naming the ones it kept."""
        try:
            wait_for(lambda: len(self.fds()) <= len(before), timeout=timeout, what=what)
        except AssertionError as e:
            kept = sorted(set(self.fd_targets().items()) - set(before.items()))
            raise AssertionError(f"{e}; the daemon kept {kept}") from None

    def sanitized(self):
        """A sanitizer build: its shadow memory and quarantine count in
        VmRSS, so RSS is measured on the plain build only. ASan is a
        library the daemon maps; ThreadSanitizer is linked in."""
        with open(f"/proc/{self.pid}/maps") as f:
            return "libasan" in f.read() or tsan_build(self.binary)

    def rss_kb(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def cpu_seconds(self):
        """The CPU time (user + system) the daemon has used: what a call
        costs it, whatever else the machine runs (unlike wall time)."""
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def private_kb(self):
        """Memory this process has written (heap, stacks, library data and
        relocations): its own cost, unlike the clean text of the libraries it
        maps, which the kernel counts as private or shared depending on
        whether another process happens to map the same pages."""
        with open(f"/proc/{self.pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Private_Dirty:"):
                    return int(line.split()[1])
        return 0

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, timeout=15):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("daemon did not stop on SIGTERM")
        if self.proc:
            self.log.close()
        return self.proc.returncode if self.proc else None


@pytest.fixture
def daemon_factory(kinglet_bin):
    started = []
    with tempfile.TemporaryDirectory(prefix="kinglet-test-") as d:
        def make(extra_args=(), workdir=None, start=True):
            wd = workdir or tempfile.mkdtemp(dir=d)
            dm = Daemon(kinglet_bin, wd, extra_args)
            started.append(dm)
            return dm.start() if start else dm
        yield make
        for dm in started:
            if dm.proc and dm.proc.poll() is None:
                dm.proc.kill()
                dm.proc.wait()


@pytest.fixture
def daemon(daemon_factory):
    d = daemon_factory()
    yield d
    rc = d.stop()
    assert rc == 0, f"daemon exited with {rc}:\n{d.logtext()}"


def channel(daemon, **opts):
    import grpc
    options = [(k, v) for k, v in opts.items()]
    # One connection per channel: grpcio otherwise shares connections
    # between channels, including dead ones to a daemon that restarted.
    options.append(("grpc.use_local_subchannel_pool", 1))
    return grpc.insecure_channel("unix://" + daemon.sock, options=options)


class PodDaemon(Daemon):
    """A daemon in a network + mount namespace of its own (unshare execs the
    daemon, so the pid is the daemon's): its bridge, veths, nftables table,
    namespace bind mounts and /dev/shm mounts never reach the machine's. A
    restart joins the first daemon's namespaces again (nsenter), as a daemon
    restarted on the same node would find them."""
    default_args = ()

    def __init__(self, binary, workdir, extra_args=()):
        super().__init__(binary, workdir, extra_args)
        self.holder = None
        # commands run in the new namespaces before the first start (an
        # uplink with a default route, say)
        self.setup = []

    def start(self, wait=True, pass_fds=()):
        if self.holder is None:
            # A holder keeps the namespaces across daemon restarts.
            self.holder = subprocess.Popen(
                ["unshare", "--net", "--mount", "--propagation", "private", "--", "sh", "-c",
                 "ip link set lo up && echo ready && exec cat"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            line = self.holder.stdout.readline()
            if line.strip() != b"ready":
                raise AssertionError("could not create the daemon's namespaces")
            for cmd in self.setup:
                self.run(*cmd)
        self.prefix = ("nsenter", "-t", str(self.holder.pid), "--net", "--mount", "--")
        return super().start(wait, pass_fds)

    def run(self, *cmd, check=True, timeout=30, net=None):
        """Runs cmd in the daemon's mount namespace and in its network
        namespace, or in the one of the namespace file `net`."""
        args = ["nsenter", "-t", str(self.holder.pid), "--mount", "--net", "--"]
        if net:
            args += ["nsenter", "--net=" + net, "--"]
        return subprocess.run(args + list(cmd), check=check, capture_output=True, text=True,
                              timeout=timeout)

    def own_mounts(self, fstype=None):
        """The mount points (of fstype, or any) in the daemon's mount
        namespace below its own directory. Never count every mount there:
        the namespace starts with a copy of the machine's mounts, and the
        kernel detaches such a copy when its mount point is removed on the
        machine (by another test run, say), so the count drops under us."""
        out = []
        for line in self.run("cat", "/proc/self/mountinfo").stdout.splitlines():
            f = line.split()
            where, kind = f[4], f[f.index("-") + 1]
            if (where + "/").startswith(str(self.dir) + "/") and fstype in (None, kind):
                out.append(where)
        return sorted(out)

    def close(self):
        if self.holder and self.holder.poll() is None:
            self.holder.stdin.close()
            self.holder.wait(10)


@pytest.fixture
def pod_daemon_factory(kinglet_bin):
    if os.geteuid() != 0:
        pytest.skip("pod sandboxes need root (namespaces, mounts, cgroups)")
    started = []
    with tempfile.TemporaryDirectory(prefix="kinglet-pod-test-") as d:
        def make(extra_args=(), workdir=None, start=True):
            wd = workdir or tempfile.mkdtemp(dir=d)
            dm = PodDaemon(kinglet_bin, wd, extra_args)
            started.append(dm)
            return dm.start() if start else dm
        yield make
        for dm in started:
            if dm.proc and dm.proc.poll() is None:
                dm.proc.kill()
                dm.proc.wait()
            dm.close()


def v2_controllers():
    """The controllers of the cgroup2 root at /sys/fs/cgroup (none on a
    hybrid host)."""
    try:
        return set(open("/sys/fs/cgroup/cgroup.controllers").read().split())
    except OSError:
        return set()


def vm_marks(needed):
    """The marks of a test that needs cgroup v2 controllers: run by
    tests/vm/run-cgroup-tests (in its VM where the host lacks them)."""
    return [pytest.mark.vm, pytest.mark.skipif(
        not set(needed) <= v2_controllers(),
        reason="needs cgroup v2 controllers on /sys/fs/cgroup: run tests/vm/run-cgroup-tests")]
