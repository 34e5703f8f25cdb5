"""Fixtures for the OCI executor tests: a busybox-static rootfs built here,
bundles made from a Python dict, and the runtime under test.

Every test that says it works for "any runtime" takes the `runtime` fixture,
parametrized over kinglet, crun and runc (Debian's crun and runc are the
references: a disagreement shows up as one of them failing). crun 1.8
refuses to run on a hybrid cgroup host, so both references run inside a
private mount namespace where the cgroup2 hierarchy is mounted on
/sys/fs/cgroup: the three runtimes see the same cgroup layout.

The fixtures live here, not in a conftest.py: test modules import them
(`from ocihelpers import *`), so that no second module named `conftest`
shadows the one other test directories import from.
"""
import errno
import json
import os
import shutil
import subprocess
import uuid

import pytest

from waiting import wait_for

__all__ = ["base_config", "Runtime", "rootfs", "runtime", "kinglet", "make_bundle", "cid",
           "private_rootfs", "BUSYBOX", "APPLETS", "CAPS", "cgroup2_root", "proc_cgroup",
           "skip_for_runc", "RUN_CGROUP", "pid_gone"]

# This test run's own cgroup parent (tests/conftest.py): the cgroupsPath of
# every bundle that names one goes below it.
RUN_CGROUP = "/" + os.environ["KINGLET_TEST_CGROUP"]

BUSYBOX = "/bin/busybox"
APPLETS = ["sh", "true", "false", "ls", "cat", "id", "echo", "sleep", "hostname", "grep",
           "stat", "touch", "mkdir", "pwd", "env", "readlink", "head", "wc", "ps", "umask",
           "test", "mount", "dd", "uname", "awk", "stty", "tty", "kill"]

CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
        "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
        "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"]


def base_config(rootfs, args):
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": args,
            "env": ["PATH=/bin", "TERM=xterm"],
            "cwd": "/",
            "capabilities": {k: list(CAPS) for k in
                             ["bounding", "effective", "permitted"]},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": str(rootfs), "readonly": True},
        "hostname": "kinglet-test",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
             "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "nodev", "mode=1777"]},
        ],
        "linux": {
            "namespaces": [{"type": t} for t in
                           ["pid", "network", "ipc", "uts", "mount", "cgroup"]],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/acpi",
                            "/sys/firmware"],
            "readonlyPaths": ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"],
        },
    }


def skip_for_runc(runtime, why):
    """Debian 12's runc is 1.1.5: features of the runtime spec that came
    with runc 1.2 are missing there. The reason names what."""
    if runtime.name == "runc":
        pytest.skip(f"runc 1.1.5 (Debian 12): {why}")


def cgroup2_root():
    """Where the cgroup2 hierarchy is mounted here, from the real layout:
    /sys/fs/cgroup on a pure v2 host, /sys/fs/cgroup/unified on a hybrid
    one; None without one."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1] == "cgroup2":
                return fields[4]
    return None


def proc_cgroup(pid):
    """The cgroup2 path of a process, relative to cgroup2_root()."""
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                return line[3:].strip()
    return None


class Runtime:
    def __init__(self, name, argv, root):
        self.name = name
        self.argv = argv
        self.root = root
        self.ids = set()  # of the containers it was asked to make

    def cmd(self, *args):
        if args and args[0] in ("create", "run") and len(args) > 1:
            self.ids.add(str(args[-1]))
        return self.argv + ["--root", str(self.root)] + [str(a) for a in args]

    def __call__(self, *args, check=False, timeout=30, **kw):
        kw.setdefault("capture_output", "stdout" not in kw and "stderr" not in kw)
        kw.setdefault("text", True)
        r = subprocess.run(self.cmd(*args), timeout=timeout, **kw)
        if check and r.returncode != 0:
            raise AssertionError(f"{self.name} {' '.join(map(str, args))}: exit "
                                 f"{r.returncode}: {r.stderr}")
        return r

    def state(self, cid):
        r = self("state", cid, check=True)
        return json.loads(r.stdout)

    def wait_status(self, cid, status, timeout=60):
        last = {}

        def reached():
            last["st"] = self.state(cid)
            return last["st"] if last["st"]["status"] == status else None
        try:
            return wait_for(reached, timeout, what=f"{cid} to be {status}")
        except AssertionError as e:
            if "st" not in last:  # state failed at once
                raise
            raise AssertionError(f"{cid}: status {last['st']['status']}, wanted {status} "
                                 f"({e})") from None


def v2_wrapper(tmp, name):
    script = tmp / f"{name}-v2"
    script.write_text(
        "#!/bin/sh\n"
        "# crun 1.8 refuses hybrid cgroup hosts: give it (and runc) a pure\n"
        "# cgroup2 view.\n"
        "exec unshare -m sh -c 'mount --make-rprivate / && "
        f"mount -t cgroup2 none /sys/fs/cgroup && exec {name} \"$@\"' {name} \"$@\"\n")
    script.chmod(0o755)
    return [str(script)]


def crun_wrapper(tmp):
    return v2_wrapper(tmp, "crun")


CGROUP2 = "/sys/fs/cgroup/unified" if os.path.exists("/sys/fs/cgroup/unified/cgroup.procs") \
    else "/sys/fs/cgroup"


def pid_gone(pid):
    """pid has exited: no such process, or a zombie its parent has yet to
    reap."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def remove_cgroup(path):
    """rmdir of a cgroup and its children, deepest first (a cgroup with
    processes stays, and says so by failing)."""
    def removed():
        subs = sorted((os.path.join(dp, x) for dp, dns, _ in os.walk(path) for x in dns),
                      key=len, reverse=True)
        try:
            for d in subs + [path]:
                os.rmdir(d)
        except OSError as e:
            # EBUSY while the last killed processes leave it
            if e.errno != errno.EBUSY:
                raise
        return not os.path.isdir(path)
    if os.path.isdir(path):
        wait_for(removed, what=f"cgroup {path} to be removed")


def cleanup(rt):
    if rt.root.exists():
        for d in rt.root.iterdir():
            if d.is_dir():
                rt("delete", "--force", d.name, timeout=30)
    # A run that fails half-way (crun 1.8.1 on features it lacks, which the
    # tests then skip) leaves the cgroup it made for the container, named
    # after the id at the cgroup2 root (crun) or under /kinglet (kinglet).
    for cid in rt.ids:
        for path in (os.path.join(CGROUP2, cid), os.path.join(CGROUP2, "kinglet", cid)):
            remove_cgroup(path)




@pytest.fixture(scope="session")
def rootfs(tmp_path_factory):
    """A read-only-by-spec rootfs with busybox-static and its applets."""
    if not os.path.exists(BUSYBOX):
        pytest.skip("needs Debian's busybox-static (/bin/busybox)")
    out = subprocess.run(["file", "-L", BUSYBOX], capture_output=True, text=True)
    if out.returncode == 0 and "statically linked" not in out.stdout:
        pytest.skip("/bin/busybox is not the static build (install busybox-static)")
    root = tmp_path_factory.mktemp("rootfs")
    root.chmod(0o755)  # pytest makes it 0700: non-root users could not exec
    for d in ["bin", "proc", "dev", "sys", "tmp", "etc", "root", "mnt"]:
        (root / d).mkdir()
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    for a in APPLETS:
        os.symlink("busybox", root / "bin" / a)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\n")
    return root


@pytest.fixture(params=["kinglet", "crun", "runc"])
def runtime(request, kinglet_bin, tmp_path):
    root = tmp_path / "state"
    if request.param == "kinglet":
        rt = Runtime("kinglet", [kinglet_bin, "oci"], root)
    else:
        if not shutil.which(request.param):
            pytest.skip(f"{request.param} (Debian package) not installed: no reference run")
        rt = Runtime(request.param, v2_wrapper(tmp_path, request.param), root)
    yield rt
    cleanup(rt)


@pytest.fixture
def kinglet(kinglet_bin, tmp_path):
    rt = Runtime("kinglet", [kinglet_bin, "oci"], tmp_path / "state")
    yield rt
    cleanup(rt)


@pytest.fixture
def make_bundle(rootfs, tmp_path):
    """make_bundle(args, edit=None) -> bundle dir; edit(config) may change
    the config dict in place."""
    def make(args, edit=None, root=None):
        b = tmp_path / ("bundle-" + uuid.uuid4().hex[:8])
        b.mkdir()
        cfg = base_config(root or rootfs, args)
        # below this run's cgroup, not the runtime's default parent (shared
        # with other runs and the machine's own containers), unless the test
        # names one or takes it away
        cfg["linux"]["cgroupsPath"] = f"{RUN_CGROUP}/{b.name}"
        if edit:
            edit(cfg)
        (b / "config.json").write_text(json.dumps(cfg, indent=1))
        return b
    return make


@pytest.fixture
def cid():
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture
def private_rootfs(rootfs, tmp_path):
    """A copy of the rootfs a test may change."""
    dst = tmp_path / "rootfs"
    shutil.copytree(rootfs, dst, symlinks=True)
    return dst
