"""Helpers and fixtures of the cgroup tests: the kcgroup driver
(tests/vm/kcgroup.c, which calls src/oci/cgroup.c), the cgroup2 mount, and
cgroups that are killed and removed after each test.

Test modules import the fixtures from here (there is no conftest.py in
tests/vm: a second module named `conftest` would shadow the one that other
test directories import from). Tests that need cgroup v2 controllers carry
`needs_controllers`; tests/vm/run-cgroup-tests runs them directly where the
host has the controllers and inside a VM (tests/vm/run-in-vm) otherwise."""
import json
import os
import pathlib
import shutil
import signal
import subprocess

import pytest

import waiting

SRCDIR = pathlib.Path(os.environ.get("KINGLET_SRCDIR", pathlib.Path(__file__).resolve().parent.parent.parent))
TIMEOUT = float(os.environ.get("KINGLET_TEST_TIMEOUT", "60"))  # the VM is 20-40x slower


def cgroup2_mount():
    """The cgroup2 mount point, as kinglet finds it (canonical places first)."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split(" ")[0] == "cgroup2":
                found.append(left.split(" ")[4].replace("\\040", " "))
    for canonical in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        if canonical in found:
            return canonical
    return found[0] if found else None


def root_controllers():
    mount = cgroup2_mount()
    if not mount:
        return set()
    return set(pathlib.Path(mount, "cgroup.controllers").read_text().split())


NEEDED = {"cpu", "cpuset", "memory", "pids", "io"}


def has_v2_controllers():
    return NEEDED <= root_controllers()


def wait_for(cond, what, timeout=TIMEOUT):
    """waiting.wait_for with `what` second and the VM's stretched timeout,
    as the cgroup tests call it."""
    return waiting.wait_for(cond, timeout, interval=0.02, what=what)


def read(path):
    return pathlib.Path(path).read_text()


def keyed(path):
    """A flat-keyed cgroup file (cgroup.events, memory.events) as a dict."""
    out = {}
    for line in read(path).splitlines():
        k, _, v = line.partition(" ")
        out[k] = v
    return out


class Cgroups:
    """Creates cgroups through kcgroup below /kinglet-test-<pid>/ and removes
    them (and everything in them) afterwards."""

    def __init__(self, kcgroup):
        self.kcgroup = kcgroup
        self.parent = f"/kinglet-test-{os.getpid()}"
        self.made = []
        self.procs = []

    def run(self, *args, check=True, input=None):
        p = subprocess.run([self.kcgroup, *args], capture_output=True, text=True,
                           timeout=TIMEOUT, input=input)
        if check and p.returncode != 0:
            raise AssertionError(f"kcgroup {' '.join(args)}: exit {p.returncode}: {p.stderr}")
        return p

    def create(self, name, resources=None, tmp_path=None, check=True):
        res = ""
        if resources is not None:
            res = "-"
        p = self.run("create", f"{self.parent}/{name}", name, res, check=check,
                     input=json.dumps(resources) if resources is not None else None)
        if p.returncode == 0:
            self.made.append(p.stdout.strip())
        return p

    def path(self, name):
        return cgroup2_mount() + f"{self.parent}/{name}"

    def spawn(self, abs_path, *argv, **kw):
        proc = subprocess.Popen([self.kcgroup, "exec", abs_path, "--", *argv],
                                stdout=kw.get("stdout", subprocess.PIPE),
                                stderr=kw.get("stderr", subprocess.PIPE), text=True,
                                cwd=kw.get("cwd"))
        self.procs.append(proc)
        return proc

    def cleanup(self):
        for abs_path in reversed(self.made):
            if os.path.isdir(abs_path):
                self.run("kill", abs_path, "KILL", check=False)
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            try:
                proc.communicate(timeout=TIMEOUT)
            except Exception:
                pass
        for abs_path in reversed(self.made):
            if os.path.isdir(abs_path):
                self.run("destroy", abs_path, check=False)
        mount = cgroup2_mount()
        if mount and os.path.isdir(mount + self.parent):
            for d in sorted(pathlib.Path(mount + self.parent).rglob("*"), reverse=True):
                if d.is_dir():
                    d.rmdir()
            os.rmdir(mount + self.parent)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="cgroup tests need root")
needs_controllers = pytest.mark.skipif(
    not has_v2_controllers(),
    reason="needs cgroup v2 controllers (cpu, cpuset, memory, pids, io): this host has "
    f"{sorted(root_controllers()) or 'none'}; run tests/vm/run-cgroup-tests",
)


@pytest.fixture(scope="session")
def kcgroup():
    candidates = []
    if os.environ.get("KCGROUP"):
        candidates.append(os.environ["KCGROUP"])
    if os.environ.get("KINGLET_BUILDDIR"):
        candidates.append(os.path.join(os.environ["KINGLET_BUILDDIR"], "tests/vm/kcgroup"))
    if os.environ.get("KINGLET_BIN"):
        candidates.append(os.path.join(os.path.dirname(os.environ["KINGLET_BIN"]), "tests/vm/kcgroup"))
    candidates.append(str(SRCDIR / "build" / "default" / "tests" / "vm" / "kcgroup"))
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    pytest.fail(f"kcgroup driver not found (tried {candidates}): make tests/vm/kcgroup")


@pytest.fixture(scope="session")
def busybox():
    path = shutil.which("busybox") or "/bin/busybox"
    if not os.access(path, os.X_OK):
        pytest.fail("busybox not found: install the Debian package busybox-static")
    return path


@pytest.fixture
def cgroups(kcgroup):
    if not cgroup2_mount():
        pytest.skip("no cgroup2 file system mounted")
    c = Cgroups(kcgroup)
    yield c
    c.cleanup()
