"""exec, the console socket, hooks, user namespaces."""
import array
import subprocess
import json
import os
import pathlib
import select
import shutil
import socket
import tempfile
import time

import pytest

from ocihelpers import *  # noqa: F401,F403 (fixtures)
from waiting import wait_for



@pytest.fixture
def running(runtime, make_bundle, cid, tmp_path):
    def start(edit=None, args=("sleep", "1000")):
        b = make_bundle(list(args), edit=edit)
        with open(tmp_path / "out", "w") as out:
            runtime("run", "--detach", "--bundle", b, cid, stdout=out, stderr=out, check=True)
        runtime.wait_status(cid, "running")
        return cid
    return start


def test_exec_joins_the_container(runtime, running, cid):
    running()
    init = runtime.state(cid)["pid"]
    r = runtime("exec", cid, "sh", "-c", "hostname; echo $$; cat /proc/1/cmdline | head -c 5; "
                "echo; readlink /proc/self/ns/net")
    assert r.returncode == 0, r.stderr
    host, pid, cmd, net = r.stdout.split("\n")[:4]
    assert host == "kinglet-test"
    assert int(pid) > 1
    assert cmd.startswith("sleep")
    assert net == os.readlink(f"/proc/{init}/ns/net")
    # The same cgroup as the init.
    r = runtime("exec", cid, "grep", "^0::", "/proc/self/cgroup")
    assert r.returncode == 0, r.stderr
    with open(f"/proc/{init}/cgroup") as f:
        init_cg = [l for l in f.read().splitlines() if l.startswith("0::")][0]
    assert r.stdout.strip() in (init_cg, "0::/")  # "/" when seen from its cgroup namespace


def test_exec_exit_status_and_security(runtime, running, cid):
    running()
    r = runtime("exec", cid, "sh", "-c", "grep -E 'NoNewPrivs|CapBnd' /proc/self/status; exit 9")
    assert r.returncode == 9
    if runtime.name == "kinglet":
        # kinglet applies the container's process spec to exec, like runc;
        # crun 1.8.1 does not set no_new_privs without --no-new-privs.
        assert "NoNewPrivs:\t1" in r.stdout
    bnd = int(r.stdout.split("CapBnd:")[1].split()[0], 16)
    assert not bnd & (1 << 21)  # CAP_SYS_ADMIN is not in the spec's bounding set


def test_exec_process_json(runtime, running, cid, tmp_path):
    running()
    proc = {"args": ["sh", "-c", "id -u; pwd; echo $X"], "cwd": "/tmp", "env": ["X=y", "PATH=/bin"],
            "user": {"uid": 99, "gid": 99}}
    (tmp_path / "p.json").write_text(json.dumps(proc))
    r = runtime("exec", "--process", tmp_path / "p.json", cid)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["99", "/tmp", "y"]


def test_exec_preserve_fds(runtime, running, cid, tmp_path):
    running()
    p = tmp_path / "passed"
    p.write_text("through fd 3\n")
    # A shell puts the file on fd 3 of the runtime (this process's own fd 3
    # may belong to pytest).
    r = subprocess.run(["sh", "-c", 'exec 3<"$0"; exec "$@"', str(p)]
                       + runtime.cmd("exec", "--preserve-fds", "1", cid, "cat", "/proc/self/fd/3"),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout == "through fd 3\n", r.stderr


@pytest.mark.parametrize("n", ["-1", "x", "1025", "4294967299"])
def test_exec_preserve_fds_out_of_range(kinglet, cid, n):
    # as create and run take it (refused before the container is looked
    # up); an fd number past the limit made the exec helper fail without
    # saying why, and a word or a negative number meant 0
    r = kinglet("exec", "--preserve-fds", n, cid, "true")
    assert r.returncode == 2 and "expected a number from 0 to 1024" in r.stderr, r.stderr


def test_exec_in_stopped_container_fails(runtime, make_bundle, cid, tmp_path):
    b = make_bundle(["true"])
    with open(tmp_path / "out", "w") as out:
        runtime("create", "--bundle", b, cid, stdout=out, stderr=out, check=True)
    runtime("start", cid, check=True)
    runtime.wait_status(cid, "stopped")
    r = runtime("exec", cid, "true")
    assert r.returncode != 0


def recv_fd(conn):
    fds = array.array("i")
    msg, anc, flags, addr = conn.recvmsg(16, socket.CMSG_LEN(fds.itemsize))
    for level, typ, data in anc:
        if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            fds.frombytes(data[:fds.itemsize])
    assert fds, "no fd received"
    return fds[0]


def read_pty(master, want):
    """What the pty master gives until `want` is in it, or until it ends
    (EIO once the last slave is closed)."""
    data = bytearray()

    def got():
        if select.select([master], [], [], 0)[0]:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return True
            if not chunk:
                return True
            data.extend(chunk)
        return want in data
    wait_for(got, what=f"{want!r} on the pty")
    return bytes(data)


def test_terminal_over_console_socket(runtime, make_bundle, cid, tmp_path):
    sock_path = str(tmp_path / "console.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    srv.listen(1)

    def edit(c):
        c["process"]["terminal"] = True
        c["process"]["consoleSize"] = {"height": 33, "width": 101}
    b = make_bundle(["sh", "-c", "tty; stty size; test -t 0 && echo istty; sleep 1000"],
                    edit=edit)
    with open(tmp_path / "out", "w") as out:
        runtime("create", "--bundle", b, "--console-socket", sock_path, cid, stdout=out,
                stderr=out, check=True)
    srv.settimeout(60)
    conn, _ = srv.accept()
    master = recv_fd(conn)
    runtime("start", cid, check=True)
    data = read_pty(master, b"istty")
    os.close(master)
    text = data.decode()
    assert "/dev/pts/0" in text
    assert "33 101" in text
    assert "istty" in text


HOOK = """#!/bin/sh
cat > "{out}.$$"
mv "{out}.$$" "{out}"
"""


def test_hooks(runtime, make_bundle, cid, tmp_path):
    skip_for_runc(runtime, "its poststart hook has run before `start`")
    hooks = {}
    for kind in ["prestart", "createRuntime", "poststart", "poststop"]:
        script = tmp_path / f"{kind}.sh"
        script.write_text(HOOK.format(out=tmp_path / f"{kind}.json"))
        script.chmod(0o755)
        hooks[kind] = [{"path": str(script), "args": [str(script), kind], "timeout": 10}]
    # createContainer and startContainer run in the container.
    hooks["startContainer"] = [{"path": "/bin/sh", "args": ["sh", "-c", "echo hook > /tmp/sc"]}]

    def edit(c):
        c["hooks"] = hooks
        c["annotations"] = {"org.test": "yes"}
    b = make_bundle(["sh", "-c", "cat /tmp/sc; sleep 1000"], edit=edit)
    with open(tmp_path / "out", "w") as out:
        runtime("create", "--bundle", b, cid, stdout=out, stderr=out, check=True)
    pid = runtime.state(cid)["pid"]
    for kind in ["prestart", "createRuntime"]:
        st = json.loads((tmp_path / f"{kind}.json").read_text())
        assert st["id"] == cid and st["pid"] == pid
        assert st["annotations"] == {"org.test": "yes"}
    assert not (tmp_path / "poststart.json").exists()
    runtime("start", cid, check=True)
    wait_for((tmp_path / "poststart.json").exists, what="the poststart hook")
    try:
        wait_for(lambda: "hook" in (tmp_path / "out").read_text(),
                 what="the startContainer hook's file")
    except AssertionError as e:
        raise AssertionError(f"{e}: {(tmp_path / 'out').read_text()!r}") from None
    runtime("kill", cid, "KILL", check=True)
    runtime.wait_status(cid, "stopped")
    runtime("delete", cid, check=True)
    st = json.loads((tmp_path / "poststop.json").read_text())
    assert st["id"] == cid


def test_failing_hook_fails_create(runtime, make_bundle, cid, tmp_path):
    def edit(c):
        c["hooks"] = {"createRuntime": [{"path": "/bin/false"}]}
    b = make_bundle(["true"], edit=edit)
    r = runtime("create", "--bundle", b, cid)
    assert r.returncode != 0
    assert runtime("state", cid).returncode != 0 or runtime.state(cid)["status"] == "stopped"


def test_hook_timeout(kinglet, make_bundle, cid):
    def edit(c):
        c["hooks"] = {"prestart": [{"path": "/bin/sleep", "args": ["sleep", "100"],
                                    "timeout": 1}]}
    b = make_bundle(["true"], edit=edit)
    t = time.monotonic()
    r = kinglet("create", "--bundle", b, cid)
    assert r.returncode != 0
    assert "timed out" in r.stderr and "hooks.prestart[0]" in r.stderr
    assert time.monotonic() - t < 60  # the hook's 1 s timeout, not its 100 s


@pytest.fixture
def world_readable_rootfs(rootfs):
    """The rootfs under a path the mapped root (host uid 100000) can walk:
    pytest's own temporary directories are 0700."""
    d = tempfile.mkdtemp(prefix="kinglet-userns-", dir="/tmp")
    os.chmod(d, 0o755)
    shutil.copytree(rootfs, os.path.join(d, "rootfs"), symlinks=True)
    yield pathlib.Path(d)
    shutil.rmtree(d)


def test_user_namespace_with_mappings(runtime, world_readable_rootfs, cid):
    def edit(c):
        c["linux"]["namespaces"].append({"type": "user"})
        c["linux"]["uidMappings"] = [{"containerID": 0, "hostID": 100000, "size": 65536}]
        c["linux"]["gidMappings"] = [{"containerID": 0, "hostID": 100000, "size": 65536}]
        # sysfs needs a user namespace that owns the network one: keep it.
    cfg = base_config(world_readable_rootfs / "rootfs",
                      ["sh", "-c", "cat /proc/self/uid_map /proc/self/gid_map; id -u"])
    edit(cfg)
    b = world_readable_rootfs / "bundle"
    b.mkdir()
    (b / "config.json").write_text(json.dumps(cfg))
    r = runtime("run", "--bundle", b, cid)
    assert r.returncode == 0, r.stderr
    lines = [l.split() for l in r.stdout.splitlines()]
    assert lines[0] == ["0", "100000", "65536"]
    assert lines[1] == ["0", "100000", "65536"]
    assert lines[2] == ["0"]


def test_user_namespace_without_its_network_gets_the_hosts_sysfs(kinglet, world_readable_rootfs,
                                                                 cid):
    # No sysfs of its own for a user namespace that does not own the network
    # namespace: the host's /sys, bound through descriptors, read-only all
    # the way down.
    cfg = base_config(world_readable_rootfs / "rootfs",
                      ["sh", "-c", "ls /sys/kernel > /dev/null && echo listed; "
                       "awk '$5 == \"/sys\"' /proc/self/mountinfo; "
                       "awk '$5 ~ \"^/sys/\" { n++; if ($6 !~ \"^ro\") w++ } "
                       "END { print n + 0; print w + 0 }' /proc/self/mountinfo"])
    cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"]
                                  if n["type"] != "network"] + [{"type": "user"}]
    cfg["linux"]["uidMappings"] = [{"containerID": 0, "hostID": 100000, "size": 65536}]
    cfg["linux"]["gidMappings"] = [{"containerID": 0, "hostID": 100000, "size": 65536}]
    b = world_readable_rootfs / "bundle"
    b.mkdir()
    (b / "config.json").write_text(json.dumps(cfg))
    r = kinglet("run", "--bundle", b, cid)
    assert r.returncode == 0, r.stderr
    listed, sys_line, below, writable_below = r.stdout.splitlines()
    assert listed == "listed"
    assert sys_line.split()[5].split(",")[0] == "ro"
    assert int(below) > 0 and writable_below == "0", r.stdout


def test_idmapped_bind_mount(runtime, world_readable_rootfs, cid):
    # A host directory owned by root, mounted idmapped into a container
    # whose root is host uid 100000: inside, the files belong to root; the
    # same directory bound without idmap shows them as nobody.
    skip_for_runc(runtime, "no idmapped mounts (runc 1.2)")
    data = world_readable_rootfs / "data"
    data.mkdir()
    (data / "f").write_text("x")
    os.chmod(data, 0o755)
    for d in ("idmapped", "plain"):  # the mapped root may not create them
        (world_readable_rootfs / "rootfs" / d).mkdir()

    def edit(c):
        c["linux"]["namespaces"].append({"type": "user"})
        c["linux"]["uidMappings"] = [{"containerID": 0, "hostID": 100000, "size": 65536}]
        c["linux"]["gidMappings"] = [{"containerID": 0, "hostID": 100000, "size": 65536}]
        c["mounts"].append({"destination": "/idmapped", "type": "bind", "source": str(data),
                            "options": ["rbind", "idmap"]})
        c["mounts"].append({"destination": "/plain", "type": "bind", "source": str(data),
                            "options": ["rbind"]})
    cfg = base_config(world_readable_rootfs / "rootfs",
                      ["sh", "-c", "stat -c %u:%g /idmapped/f /plain/f; "
                       "touch /idmapped/new && echo wrote"])
    edit(cfg)
    b = world_readable_rootfs / "bundle"
    b.mkdir()
    (b / "config.json").write_text(json.dumps(cfg))
    r = runtime("run", "--bundle", b, cid)
    if runtime.name == "crun" and r.returncode != 0:
        pytest.skip(f"crun 1.8.1: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0:0", "65534:65534", "wrote"]
    st = os.stat(data / "new")
    assert (st.st_uid, st.st_gid) == (0, 0)  # written as the container's root = host root


def test_exec_tty(runtime, running, cid, tmp_path):
    skip_for_runc(runtime, "exec --tty with --console-socket does not return")
    running()
    sock_path = str(tmp_path / "exec-console.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    srv.listen(1)
    srv.settimeout(60)
    with open(tmp_path / "exec-out", "w") as out:
        p = subprocess.Popen(runtime.cmd("exec", "--tty", "--console-socket", sock_path, cid,
                                         "sh", "-c", "tty; test -t 1 && echo istty"),
                             stdout=out, stderr=out)
    conn, _ = srv.accept()
    master = recv_fd(conn)
    data = read_pty(master, b"istty")
    assert p.wait(timeout=60) == 0, (tmp_path / "exec-out").read_text()
    os.close(master)
    assert b"/dev/pts/" in data and b"istty" in data


def test_run_with_terminal_proxies_the_pty(kinglet, make_bundle, cid):
    # Foreground run, process.terminal and no --console-socket: the runtime
    # keeps the pty master and copies between it and its own stdio. kinglet
    # only: crun 1.8.1 insists that its stdin be a terminal.
    runtime = kinglet
    def edit(c):
        c["process"]["terminal"] = True
    b = make_bundle(["sh"], edit=edit)
    r = subprocess.run(runtime.cmd("run", "--bundle", b, cid), input="tty; exit 3\n",
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "/dev/pts/0" in r.stdout


def test_exec_detach_with_pid_file(runtime, running, cid, tmp_path):
    running()
    pidf = tmp_path / "exec.pid"
    # The detached process keeps the stdio it was given: a file, not a pipe.
    with open(tmp_path / "exec-out", "w") as out:
        r = runtime("exec", "--detach", "--pid-file", pidf, cid, "sleep", "1000", stdout=out,
                    stderr=out)
    assert r.returncode == 0, (tmp_path / "exec-out").read_text()
    pid = int(pidf.read_text())
    # runc writes the pid before the process has exec'd: wait for the exec.
    def cmd():
        return open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0]
    try:
        wait_for(lambda: cmd() == b"sleep", what=f"pid {pid} to exec sleep")
    except AssertionError as e:
        raise AssertionError(f"{e}: {cmd()!r}") from None
    init = runtime.state(cid)["pid"]
    assert os.readlink(f"/proc/{pid}/ns/pid") == os.readlink(f"/proc/{init}/ns/pid")


def test_create_container_hook_runs_in_the_container_namespaces(kinglet, make_bundle, cid,
                                                                tmp_path):
    # The runtime spec runs createContainer hooks in the container's
    # namespaces; Debian's crun 1.8.1 runs them with the host's hostname.
    runtime = kinglet
    out = tmp_path / "cc.txt"

    def edit(c):
        c["hooks"] = {"createContainer": [{
            "path": "/bin/sh",
            "args": ["sh", "-c", f"hostname > {out}; readlink /proc/self/ns/net >> {out}"]}]}
    b = make_bundle(["sleep", "1000"], edit=edit)
    with open(tmp_path / "out", "w") as o:
        runtime("create", "--bundle", b, cid, stdout=o, stderr=o, check=True)
    pid = runtime.state(cid)["pid"]
    host, net = out.read_text().split()
    assert host == "kinglet-test"
    assert net == os.readlink(f"/proc/{pid}/ns/net")


def test_exec_in_user_namespace(runtime, world_readable_rootfs, cid, tmp_path):
    cfg = base_config(world_readable_rootfs / "rootfs", ["sleep", "1000"])
    cfg["linux"]["namespaces"].append({"type": "user"})
    cfg["linux"]["uidMappings"] = [{"containerID": 0, "hostID": 100000, "size": 65536}]
    cfg["linux"]["gidMappings"] = [{"containerID": 0, "hostID": 100000, "size": 65536}]
    b = world_readable_rootfs / "bundle"
    b.mkdir()
    (b / "config.json").write_text(json.dumps(cfg))
    with open(tmp_path / "out", "w") as o:
        runtime("run", "--detach", "--bundle", b, cid, stdout=o, stderr=o, check=True)
    runtime.wait_status(cid, "running")
    r = runtime("exec", cid, "sh", "-c", "id -u; cat /proc/self/uid_map")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "0", "100000", "65536"]


def test_idmapped_mount_with_its_own_mappings(runtime, world_readable_rootfs, cid):
    # OCI 1.1 mount-level mappings, in a container WITHOUT a user namespace:
    # on-disk uid/gid 0 appear as 1000/2000 on the mount, anything unmapped
    # as the overflow id, and the plain bind shows the disk's ids.
    skip_for_runc(runtime, "no idmapped mounts (runc 1.2)")
    data = world_readable_rootfs / "data"
    data.mkdir()
    (data / "root-owned").write_text("x")
    (data / "uid5").write_text("y")
    os.chown(data / "uid5", 5, 5)
    os.chmod(data, 0o755)
    cfg = base_config(world_readable_rootfs / "rootfs",
                      ["sh", "-c", "stat -c %u:%g /mapped/root-owned /mapped/uid5 "
                       "/plain/root-owned; grep -c . /proc/self/uid_map"])
    cfg["mounts"].append({"destination": "/mapped", "type": "bind", "source": str(data),
                          "options": ["rbind", "idmap"],
                          "uidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}],
                          "gidMappings": [{"containerID": 0, "hostID": 2000, "size": 1}]})
    cfg["mounts"].append({"destination": "/plain", "type": "bind", "source": str(data),
                          "options": ["rbind"]})
    b = world_readable_rootfs / "bundle"
    b.mkdir()
    (b / "config.json").write_text(json.dumps(cfg))
    r = runtime("run", "--bundle", b, cid)
    if runtime.name == "crun" and r.returncode != 0:
        pytest.skip(f"crun 1.8.1: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    out = r.stdout.split()
    assert out[:3] == ["1000:2000", "65534:65534", "0:0"]
    assert out[3] == "1"  # still the host's user namespace (one full-range line)


def test_mount_mappings_need_idmap_and_both_maps(kinglet, world_readable_rootfs, cid):
    cfg = base_config(world_readable_rootfs / "rootfs", ["true"])
    m = {"destination": "/m", "type": "bind", "source": "/tmp", "options": ["rbind"],
         "uidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}],
         "gidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}]}
    cfg["mounts"].append(m)
    b = world_readable_rootfs / "bundle"
    b.mkdir()
    (b / "config.json").write_text(json.dumps(cfg))
    r = kinglet("run", "--bundle", b, cid)
    assert r.returncode != 0 and "need the `idmap` or `ridmap` option" in r.stderr
    m["options"] = ["rbind", "idmap"]
    del m["gidMappings"]
    (b / "config.json").write_text(json.dumps(cfg))
    r = kinglet("run", "--bundle", b, cid)
    assert r.returncode != 0 and "go together" in r.stderr
    # idmap with no mappings anywhere: a clear error, not ENOTSUP from the kernel.
    del m["uidMappings"]
    (b / "config.json").write_text(json.dumps(cfg))
    r = kinglet("run", "--bundle", b, cid)
    assert r.returncode != 0 and "idmap needs uidMappings" in r.stderr, r.stderr
