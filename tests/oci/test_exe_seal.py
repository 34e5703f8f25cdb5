"""CVE-2019-5736: a container must not be able to overwrite kinglet's binary.

The sequence of the published exploit (exe_attack.c): a container process
executes /proc/self/exe (process.args[0] of the bundle, or the program of
`oci exec`), which names the binary of the kinglet process that starts it; a
second process of the container opens /proc/PID/exe of the first with O_PATH
and, once no process runs the binary any more, reopens it for writing. Run
with and without a PID namespace, through `create`+`start`, `run` and `exec`,
with the container's monitor SIGKILLed meanwhile (`exec` runs a small
sealed program of its own until the command's execve: its case checks that
/proc/self/exe leads there) (the monitor runs from a
sealed memfd; with `oci run` the caller, which runs the binary, stays until
the monitor is gone). kinglet's binary must come out unchanged.

The test runs a copy of the binary under test, so that a failure cannot
destroy the build. A last case runs that copy from a memfd that is not
sealed (nothing to make an overlayfs view of): kinglet must then seal a copy
of itself in memory.
"""
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess

import pytest

from ocihelpers import *  # noqa: F401,F403 (fixtures)
from ocihelpers import Runtime, cleanup
from musl import static_prog
from waiting import wait_for

HERE = os.path.dirname(os.path.abspath(__file__))


def elf_interpreter(path):
    """PT_INTERP of a 64-bit little-endian ELF file, or None."""
    with open(path, "rb") as f:
        data = f.read(1 << 16)
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        off = phoff + i * phentsize
        ptype, = struct.unpack_from("<I", data, off)
        if ptype == 3:  # PT_INTERP
            o, = struct.unpack_from("<Q", data, off + 8)
            n, = struct.unpack_from("<Q", data, off + 32)
            with open(path, "rb") as f:
                f.seek(o)
                return f.read(n).rstrip(b"\0").decode()
    return None


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def sha256_fd(fd):
    return hashlib.sha256(os.pread(fd, 1 << 30, 0)).hexdigest()


def wait_file(path, what):
    wait_for(lambda: os.path.exists(path), what=what)
    with open(path) as f:
        return f.read()


@pytest.fixture(scope="module")
def attack_prog(tmp_path_factory):
    return static_prog(tmp_path_factory, os.path.join(HERE, "exe_attack.c"), "attacker")


@pytest.fixture
def victim(kinglet_bin, tmp_path):
    """A copy of the kinglet binary, and a runtime that uses it."""
    d = tmp_path / "bin"
    d.mkdir()
    path = d / "kinglet"
    shutil.copy2(kinglet_bin, path)
    rt = Runtime("kinglet", [str(path), "oci"], tmp_path / "state")
    procs = []
    yield path, rt, procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    # With the pristine binary: the copy may be broken.
    cleanup(Runtime("kinglet", [kinglet_bin, "oci"], rt.root))


def attack_refused(out, st, binary, before, whose, caller=None):
    """The attacker held /proc/PID/exe of `whose` by O_PATH; with the monitor
    gone too (nothing of ours left to keep the binary busy), its write
    must be refused and the binary unchanged.

    `caller`, a foreground `oci run`, deletes the container (the attacker
    with it) as soon as the monitor is gone: it is stopped until the
    attacker has reported, or a busy machine lets it kill the attacker
    between its open and its report. Stopped, it still runs from the
    binary (its sealed view), as it would until the container is gone."""
    opened = wait_file(out / "opened", "the attacker's O_PATH open of /proc/PID/exe")
    print(f"/proc/PID/exe of {whose}: {opened}")
    if caller:
        os.kill(caller.pid, signal.SIGSTOP)
    try:
        os.kill(st["monitor"], signal.SIGKILL)
        result = wait_file(out / "result", "the attacker's write attempt")
    finally:
        if caller:
            os.kill(caller.pid, signal.SIGCONT)
    print(f"attacker: {result}")
    assert sha256(binary) == before, f"kinglet's binary was overwritten ({result})"
    assert result in ("open for writing: Read-only file system",
                      "write: Operation not permitted"), result


@pytest.mark.parametrize("pidns", [True, False], ids=["pidns", "hostpid"])
@pytest.mark.parametrize("how", ["create", "run", "exec"])
def test_container_cannot_overwrite_kinglet(victim, attack_prog, private_rootfs, make_bundle,
                                            cid, tmp_path, how, pidns):
    binary, rt, procs = victim
    interp = elf_interpreter(binary)
    if not interp:
        pytest.skip("kinglet is linked statically: no interpreter to stand in for")
    before = sha256(binary)

    # The container's rootfs gets the attacker as the dynamic loader.
    dst = private_rootfs / interp.lstrip("/")
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(attack_prog, dst)
    out = tmp_path / "out"
    out.mkdir()
    (private_rootfs / "out").mkdir()

    def edit(cfg):
        cfg["mounts"].append({"destination": "/out", "type": "bind", "source": str(out),
                              "options": ["rbind", "rw"]})
        if not pidns:
            cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"]
                                          if n["type"] != "pid"]

    args = ["/proc/self/exe", "init", "/out", interp] if how != "exec" else ["sleep", "1000"]
    b = make_bundle(args, edit=edit, root=private_rootfs)
    log = open(tmp_path / "log", "w")
    if how == "run":
        procs.append(subprocess.Popen(rt.cmd("run", "--bundle", b, cid), stdout=log,
                                      stderr=log))

        def running():
            assert procs[0].poll() is None, "oci run exited"
            r = rt("state", cid)
            return r.returncode == 0 and json.loads(r.stdout)["status"] == "running"
        wait_for(running, what="oci run to start the container")
    else:
        rt("create", "--bundle", b, cid, stdout=log, stderr=log, check=True)
        rt("start", cid, check=True)
    if how == "exec":
        # Until its execve an exec'd process runs kinglet-enter (static,
        # from a sealed memfd: src/enter), never kinglet: /proc/self/exe
        # names that program, which has no interpreter to stand in for and
        # runs for nobody but kinglet.
        r = rt("exec", cid, "/proc/self/exe", "exec", "/out", interp)
        assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
        assert "kinglet-enter: started by kinglet only" in r.stderr, r.stderr
        assert not (out / "opened").exists()
        assert sha256(binary) == before
        return
    st = json.loads((rt.root / cid / "state.json").read_text())

    attack_refused(out, st, binary, before, "the container process",
                   procs[0] if how == "run" else None)


def test_proc_self_exe_entry_cannot_overwrite_kinglet(victim, attack_prog, private_rootfs,
                                                     make_bundle, cid, tmp_path):
    """The exploit's own form, which needs no dynamic loader, so that the
    static kinglet operators ship faces it too: an entry `#!/proc/self/exe`
    that the runtime's init executes makes the kernel run the runtime's own
    executable inside the container; a process of the same PID namespace
    (the first container's init, watching) opens it through /proc/PID/exe
    and writes through that once nothing runs it any more."""
    binary, rt, procs = victim
    before = sha256(binary)
    shutil.copy(attack_prog, private_rootfs / "exe_attack")
    trigger = private_rootfs / "trigger"
    trigger.write_text("#!/proc/self/exe\n")
    trigger.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    (private_rootfs / "out").mkdir()

    def edit(cfg):
        cfg["mounts"].append({"destination": "/out", "type": "bind", "source": str(out),
                              "options": ["rbind", "rw"]})
    b = make_bundle(["/exe_attack", "watch", "/out"], edit=edit, root=private_rootfs)
    with open(tmp_path / "log", "w") as log:
        rt("create", "--bundle", b, cid, stdout=log, stderr=log, check=True)
    rt("start", cid, check=True)
    st = json.loads((rt.root / cid / "state.json").read_text())

    def join_watcher(cfg):
        for n in cfg["linux"]["namespaces"]:
            if n["type"] == "pid":
                n["path"] = f"/proc/{st['pid']}/ns/pid"
    trig = make_bundle(["/trigger"], edit=join_watcher, root=private_rootfs)
    # the window is the runtime's start-up as the trigger's interpreter: as
    # many containers as the watcher needs to see one (a handful), unless
    # the runtime's executable cannot be reached that way at all (kinglet's
    # /proc/self/exe names nothing the kernel will run as an interpreter:
    # the trigger's exec fails), which the test asserts then
    runs = []
    while not (out / "opened").exists() and len(runs) < 20:
        r = rt("run", "--bundle", trig, f"{cid}-{len(runs)}", stdin=subprocess.DEVNULL)
        rt("delete", "--force", f"{cid}-{len(runs)}")
        runs.append(r)
    if not (out / "opened").exists():
        for r in runs:
            assert r.returncode == 127 and "exec `/trigger`: No such file or directory" in r.stderr, \
                (r.returncode, r.stderr)
        assert sha256(binary) == before
        return
    attack_refused(out, st, binary, before, f"the runtime in the container ({len(runs)} tries)")


def test_unsealed_memfd_binary_is_sealed_again(kinglet_bin, attack_prog, private_rootfs,
                                               make_bundle, cid, tmp_path):
    interp = elf_interpreter(kinglet_bin)
    if not interp:
        pytest.skip("kinglet is linked statically: no interpreter to stand in for")
    fd = os.memfd_create("kinglet-unsealed", 0)
    try:
        with open(kinglet_bin, "rb") as f:
            os.write(fd, f.read())
        before = sha256_fd(fd)
        rt = Runtime("kinglet", [f"/proc/self/fd/{fd}", "oci"], tmp_path / "state")
        dst = private_rootfs / interp.lstrip("/")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(attack_prog, dst)
        out = tmp_path / "out"
        out.mkdir()
        (private_rootfs / "out").mkdir()

        def edit(cfg):
            cfg["mounts"].append({"destination": "/out", "type": "bind", "source": str(out),
                                  "options": ["rbind", "rw"]})

        b = make_bundle(["/proc/self/exe", "init", "/out", interp], edit=edit,
                        root=private_rootfs)
        try:
            with open(tmp_path / "log", "w") as log:
                rt("create", "--bundle", b, cid, stdout=log, stderr=log, check=True,
                   pass_fds=(fd,))
            rt("start", cid, check=True, pass_fds=(fd,))
            st = json.loads((rt.root / cid / "state.json").read_text())
            opened = wait_file(out / "opened", "the attacker's O_PATH open")
            print(f"/proc/PID/exe of the container process: {opened}")
            assert opened.startswith("/memfd:kinglet"), opened
            os.kill(st["monitor"], signal.SIGKILL)
            result = wait_file(out / "result", "the attacker's write attempt")
            print(f"attacker: {result}")
        finally:
            cleanup(Runtime("kinglet", [kinglet_bin, "oci"], rt.root))
        assert sha256_fd(fd) == before, f"the memfd kinglet ran from was overwritten ({result})"
        assert result == "write: Operation not permitted", result
    finally:
        os.close(fd)
