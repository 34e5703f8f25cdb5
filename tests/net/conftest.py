"""Fixtures for the networking tests: a lab made of a fresh network + mount
namespace (the "node"), in which the tests create pod namespaces with
`ip netns add` and run the net-driver test program.

Nothing here touches the machine's own network namespace: every command runs
through `nsenter` into the lab, whose /run is a private tmpfs. When the
holder process exits, the lab's mount namespace goes away with its netns
bind mounts, and with it every namespace, bridge, veth and nftables rule the
test made.
"""
import os
import pathlib
import select
import shutil
import subprocess

import pytest

from waiting import wait_for

SRCDIR = pathlib.Path(__file__).resolve().parent.parent.parent


def _driver_path():
    env = os.environ.get("NET_DRIVER")
    if env:
        return pathlib.Path(env)
    kb = os.environ.get("KINGLET_BIN")
    if kb:
        return pathlib.Path(kb).parent / "tests" / "net" / "net-driver"
    return SRCDIR / "build" / "default" / "tests" / "net" / "net-driver"


@pytest.fixture(scope="session")
def net_driver():
    path = _driver_path()
    if not os.access(path, os.X_OK):
        pytest.fail(f"net-driver not found at {path}: run `make tests/net/net-driver` "
                    "in the build directory or set NET_DRIVER")
    if os.geteuid() != 0:
        pytest.skip("network namespaces, bridges and nftables need root")
    for tool in ("unshare", "nsenter", "ip", "nft", "busybox"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} is missing (scripts/deps/net.test.txt)")
    return str(path)


def read_line(proc, timeout=60):
    """One line of proc's stdout, or None if it ends first."""
    fd = proc.stdout.fileno()
    buf = bytearray()

    def line():
        while select.select([fd], [], [], 0)[0]:
            ch = os.read(fd, 1)
            if not ch:
                return [None]
            if ch == b"\n":
                return [buf.decode()]
            buf.extend(ch)
        return None
    return wait_for(line, timeout, what=f"a line from {proc.args!r}")[0]


class Lab:
    def __init__(self, driver):
        self.driver = driver
        self.holder = subprocess.Popen(
            ["unshare", "--net", "--mount", "--propagation", "private", "--", "sh", "-c",
             "mount -t tmpfs kinglet-test-run /run && mkdir -p /run/netns && "
             "ip link set lo up && echo ready && exec cat"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            ready = read_line(self.holder)
        except AssertionError:
            ready = None
        if ready != "ready":
            self.close()
            raise RuntimeError("could not create the lab namespace")
        self.pid = self.holder.pid
        self.procs = []
        self.ipam = "/run/ipam"

    def cmd(self, args):
        return ["nsenter", "-t", str(self.pid), "-n", "-m", "--"] + list(args)

    def run(self, *args, check=True, timeout=30, input=None):
        p = subprocess.run(self.cmd(args), capture_output=True, text=True, timeout=timeout,
                           input=input)
        if check and p.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({p.returncode}): "
                                 f"{p.stdout}{p.stderr}")
        return p

    def sh(self, script, check=True, timeout=30):
        return self.run("sh", "-c", script, check=check, timeout=timeout)

    def popen(self, *args):
        p = subprocess.Popen(self.cmd(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def in_ns(self, ns, *args, **kw):
        return self.run("ip", "netns", "exec", ns, *args, **kw)

    def driver_args(self, subnet, extra=()):
        return [self.driver, "--ipam", self.ipam, "--subnet", subnet, *extra]

    def close(self):
        for p in getattr(self, "procs", []):
            if p.poll() is None:
                p.kill()
            p.wait()
        if self.holder.poll() is None:
            self.holder.stdin.close()
            try:
                self.holder.wait(10)
            except subprocess.TimeoutExpired:
                self.holder.kill()
                self.holder.wait()


@pytest.fixture
def lab(net_driver):
    lab = Lab(net_driver)
    try:
        yield lab
    finally:
        lab.close()
