"""`kinglet oci run` with linux.resources: each limit seen from inside the
container (its own cgroup namespace, cgroup2 mounted at /sys/fs/cgroup) and
its effect on the container's processes. The limit tests need cgroup v2
controllers (the VM, through tests/vm/run-cgroup-tests); the device test
runs on any cgroup2 host."""
import json
import os
import pathlib
import shutil
import subprocess
import uuid

import pytest

from cghelpers import SRCDIR, cgroup2_mount, needs_controllers, needs_root, wait_for

BUSYBOX = "/bin/busybox"
APPLETS = ["sh", "cat", "dd", "mknod", "sleep", "grep", "echo", "true", "head"]

pytestmark = needs_root


def kinglet_path():
    for c in (os.environ.get("KINGLET_BIN"),
              os.environ.get("KINGLET_BUILDDIR") and os.path.join(os.environ["KINGLET_BUILDDIR"], "kinglet"),
              str(SRCDIR / "build" / "default" / "kinglet")):
        if c and os.access(c, os.X_OK):
            return c
    return None


@pytest.fixture(scope="module")
def kinglet_oci():
    path = kinglet_path()
    if not path:
        pytest.skip("kinglet not built (make kinglet)")
    p = subprocess.run([path, "oci", "features"], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"this kinglet has no OCI executor yet (`kinglet oci features`: {p.stderr.strip()})")
    return path


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory):
    if not os.path.exists(BUSYBOX):
        pytest.skip("needs Debian's busybox-static (/bin/busybox)")
    root = tmp_path_factory.mktemp("rootfs")
    root.chmod(0o755)
    for d in ["bin", "proc", "dev", "sys", "tmp"]:
        (root / d).mkdir()
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    for a in APPLETS:
        os.symlink("busybox", root / "bin" / a)
    return root


def config(rootfs, args, resources, cgroups_path):
    caps = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_MKNOD", "CAP_SETGID",
            "CAP_SETUID", "CAP_KILL"]
    return {
        "ociVersion": "1.0.2",
        "process": {
            "user": {"uid": 0, "gid": 0}, "args": args, "env": ["PATH=/bin"], "cwd": "/",
            "capabilities": {k: caps for k in ["bounding", "effective", "permitted"]},
            "noNewPrivileges": True,
        },
        "root": {"path": str(rootfs), "readonly": True},
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup2", "source": "cgroup",
             "options": ["nosuid", "noexec", "nodev"]},
        ],
        "linux": {
            "namespaces": [{"type": t} for t in ["pid", "ipc", "uts", "mount", "cgroup"]],
            "cgroupsPath": cgroups_path,
            "resources": resources,
        },
    }


@pytest.fixture
def run(kinglet_oci, rootfs, tmp_path):
    made = []
    state_root = str(tmp_path / "state")

    def oci(*args, **kw):
        return subprocess.run([kinglet_oci, "oci", "--root", state_root, *args], capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, **kw)

    def go(args, resources, timeout=180, devices=None, detach=False):
        cid = "cg-" + uuid.uuid4().hex[:10]
        bundle = tmp_path / cid
        bundle.mkdir()
        cgroups_path = f"/kinglet-oci-test/{cid}"
        cfg = config(rootfs, args, resources, cgroups_path)
        if devices:
            cfg["linux"]["devices"] = devices
        (bundle / "config.json").write_text(json.dumps(cfg))
        made.append(cid)
        if detach:  # the container keeps the run's stdout and stderr: not pipes
            with open(bundle / "out", "w") as out:
                p = subprocess.run([kinglet_oci, "oci", "--root", state_root, "run", "--detach",
                                    "--bundle", str(bundle), cid], stdout=out, stderr=out,
                                   stdin=subprocess.DEVNULL, timeout=timeout)
            assert p.returncode == 0, (bundle / "out").read_text()
            return cid
        return oci("run", "--bundle", str(bundle), cid, timeout=timeout)

    def stopped(cid, timeout=180):
        """The state of a detached container once it has stopped, and its
        monitor's exit record."""
        def st():
            p = oci("state", cid, timeout=60)
            assert p.returncode == 0, p.stderr
            s = json.loads(p.stdout)
            return s if s["status"] == "stopped" else None
        s = wait_for(st, f"container {cid} to stop", timeout)
        rec = json.loads((tmp_path / "state" / cid / "exit.json").read_text())
        return s, rec

    go.oci, go.stopped = oci, stopped
    yield go
    for cid in made:
        oci("delete", "--force", cid, timeout=60)
    parent = pathlib.Path((cgroup2_mount() or "/nonexistent") + "/kinglet-oci-test")
    if parent.is_dir() and not any(p.is_dir() for p in parent.iterdir()):
        parent.rmdir()


SHOW = "for f in memory.max memory.swap.max pids.max cpu.max cpu.weight cpuset.cpus; do " \
       "echo $f=$(cat /sys/fs/cgroup/$f 2>/dev/null); done"


@needs_controllers
def test_limits_seen_inside_container(run):
    res = {"memory": {"limit": 64 << 20, "swap": 64 << 20}, "pids": {"limit": 20},
           "cpu": {"shares": 512, "quota": 50000, "period": 100000, "cpus": "0"}}
    p = run(["sh", "-c", SHOW], res)
    assert p.returncode == 0, p.stderr
    seen = dict(line.split("=", 1) for line in p.stdout.splitlines())
    assert seen["memory.max"] == str(64 << 20)
    assert seen["pids.max"] == "20"
    assert seen["cpu.max"] == "50000 100000"
    assert seen["cpu.weight"] == "59"
    assert seen["cpuset.cpus"] == "0"
    if seen["memory.swap.max"]:
        assert seen["memory.swap.max"] == "0"


@needs_controllers
def test_oom_kill_inside_container(run):
    mem = {"memory": {"limit": 32 << 20, "swap": 32 << 20}}
    p = run(["dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"], mem)
    assert p.returncode == 137, (p.returncode, p.stderr)  # SIGKILL by the OOM killer
    # Any SIGKILL gives 137: the monitor's record says it was the OOM killer.
    cid = run(["dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"], mem, detach=True)
    st, rec = run.stopped(cid)
    assert st["exitCode"] == 137 and st.get("exitSignal") == 9, st
    assert st.get("oomKilled") is True, st
    assert rec["oomKilled"] is True and rec["signal"] == 9, rec


@needs_controllers
def test_sigkill_is_not_an_oom_kill(run):
    # The same limit, a process well within it, killed from outside.
    cid = run(["sleep", "600"], {"memory": {"limit": 32 << 20, "swap": 32 << 20}}, detach=True)
    p = run.oci("kill", cid, "KILL", timeout=60)
    assert p.returncode == 0, p.stderr
    st, rec = run.stopped(cid)
    assert st["exitCode"] == 137 and st.get("exitSignal") == 9, st
    assert "oomKilled" not in st, st
    assert rec["oomKilled"] is False, rec


@needs_controllers
def test_pids_limit_inside_container(run):
    p = run(["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do sleep 30 & done; echo started"],
            {"pids": {"limit": 4}})
    assert "can't fork" in p.stderr or "Resource temporarily unavailable" in p.stderr, p.stderr


def test_device_denied_inside_container(run):
    # /dev/fuse (10:229) opens without any capability, so only the device
    # program can refuse it: denied by default, allowed by a rule.
    script = "echo x > /dev/null && echo null-ok; mknod /dev/f c 10 229 && echo made; true < /dev/f; echo rc=$?"
    p = run(["sh", "-c", script], {"devices": [{"allow": False, "access": "rwm"}]})
    assert "null-ok" in p.stdout and "made" in p.stdout, (p.stdout, p.stderr)
    assert "rc=1" in p.stdout and "Operation not permitted" in p.stderr, (p.stdout, p.stderr)
    p = run(["sh", "-c", script], {"devices": [{"allow": False, "access": "rwm"},
                                               {"allow": True, "type": "c", "major": 10, "minor": 229,
                                                "access": "rw"}]})
    assert "rc=0" in p.stdout, (p.stdout, p.stderr)


def test_linux_devices_allowed_inside_container(run):
    # A node the runtime creates from linux.devices can be used, as with
    # runc, although the device program denies everything else.
    p = run(["sh", "-c", "true < /dev/fuse; echo rc=$?"],
            {"devices": [{"allow": False, "access": "rwm"}]},
            devices=[{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 0o600}])
    assert "rc=0" in p.stdout, (p.stdout, p.stderr)
