"""Pulls run in a short-lived `kinglet image-pull` helper (src/image/helper.c):
its sandbox, and what happens when it, or the daemon, goes away mid-pull."""
import errno
import os
import pathlib
import re
import shutil
import signal
import socket
import stat
import subprocess
import threading

import grpc
import pytest

from cri_conftest import channel, wait_for
from imagelib import FakeRegistry, Image, Tar, sha256

# CHOWN, DAC_OVERRIDE, FOWNER, FSETID, MKNOD, SETFCAP, SYS_ADMIN
HELPER_CAPS = sum(1 << c for c in (0, 1, 3, 4, 27, 31, 21))
HELPER_UID = 2**31 - 2  # src/image/helper.c's IMAGE_HELPER_UID


@pytest.fixture(scope="module")
def slow_image():
    return Image([(Tar().bigfile("big/random.bin", 8 << 20).bytes(), "gzip")])


@pytest.fixture
def slow_registry(slow_image):
    # about 0.25 s per MiB: a pull of slow_image takes 2 s or more
    f = FakeRegistry(throttle=0.25).start()
    f.add_image("slow", slow_image)
    yield f
    f.stop()


def helpers(pid):
    """pids of the image helpers that process pid started."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and cmd == b"kinglet\0image-pull\0":
            out.append(int(p))
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def start_pull(cri, d, ref, timeout=120):
    ims = cri.grpc.ImageServiceStub(channel(d))
    return ims.PullImage.future(cri.pb.PullImageRequest(image=cri.pb.ImageSpec(image=ref)),
                                timeout=timeout)


def status_field(pid, name):
    with open(f"/proc/{pid}/status") as f:
        return re.search(rf"^{name}:\s*(\S+)", f.read(), re.M).group(1)


def test_helper_sandbox(cri, daemon_factory, slow_registry, slow_image):
    d = daemon_factory(["--insecure-registry", slow_registry.host])
    fut = start_pull(cri, d, f"{slow_registry.host}/x/slow:slow")
    h = wait_for(lambda: helpers(d.pid), timeout=60, what="the image helper")[0]
    store = os.path.join(d.root, "image")
    # wait until it has set itself up (seccomp comes last)
    wait_for(lambda: status_field(h, "Seccomp") == "2", timeout=60, what="the helper's filter")
    assert status_field(h, "NoNewPrivs") == "1"
    for f in ("CapEff", "CapPrm", "CapBnd"):
        assert int(status_field(h, f), 16) == HELPER_CAPS, (f, status_field(h, f))
    assert int(status_field(h, "CapAmb"), 16) == 0
    # an unprivileged stranger to other processes, root to files it makes
    with open(f"/proc/{h}/status") as f:
        ids = {k: v.split() for k, v in (line.split(":", 1) for line in f) if k in ("Uid", "Gid")}
    assert ids["Uid"] == ids["Gid"] == [str(HELPER_UID)] * 3 + ["0"], ids
    with open(f"/proc/{h}/status") as f:
        assert re.search(r"^Groups:\s*$", f.read(), re.M)
    assert os.readlink(f"/proc/{h}/ns/mnt") != os.readlink(f"/proc/{d.pid}/ns/mnt")
    # every mount read-only but the image store
    writable = []
    with open(f"/proc/{h}/mountinfo") as f:
        for line in f:
            fields = line.split()
            if "rw" in fields[5].split(","):
                writable.append(fields[4])
    assert writable == [store], writable
    # the only unix socket it holds is fd 3, its channel to the job thread
    with open(f"/proc/{h}/net/unix") as f:
        unix = {line.split()[6] for line in list(f)[1:]}
    held = {}
    for fd in os.listdir(f"/proc/{h}/fd"):
        try:
            held[int(fd)] = os.readlink(f"/proc/{h}/fd/{fd}")
        except OSError:
            pass
    assert [fd for fd, t in held.items() if t[8:-1] in unix and t.startswith("socket:")] == [3], held
    r = fut.result()
    assert r.image_ref == slow_image.id
    assert not helpers(d.pid)
    assert d.stop() == 0


def test_killed_helper_fails_the_pull_and_leaves_nothing(cri, daemon_factory, slow_registry,
                                                         slow_image):
    d = daemon_factory(["--insecure-registry", slow_registry.host])
    ref = f"{slow_registry.host}/x/slow:slow"
    fut = start_pull(cri, d, ref)
    tmp = pathlib.Path(d.root) / "image" / "tmp"
    wait_for(lambda: any(p.stat().st_size > (1 << 20) for p in tmp.glob("*/fs/big/random.bin")),
             timeout=30, what="a partially unpacked layer")
    h = helpers(d.pid)[0]
    os.kill(h, signal.SIGKILL)
    with pytest.raises(grpc.RpcError) as e:
        fut.result()
    assert "image helper was killed by signal 9" in e.value.details()
    assert not alive(h)
    assert list(tmp.iterdir()) == []
    # the layer it was building is free again: the next pull builds it
    slow_registry.throttle = 0
    r = start_pull(cri, d, ref).result()
    assert r.image_ref == slow_image.id
    assert d.stop() == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_daemon_going_away_ends_the_helper(cri, daemon_factory, slow_registry, sig):
    d = daemon_factory(["--insecure-registry", slow_registry.host, "--shutdown-timeout", "1"])
    # the layer is held back: the helper is mid-pull when the daemon goes,
    # however long it takes to appear on a busy machine
    # (the registry is the module's: its gate is lifted and gone after)
    gate = slow_registry.gate = threading.Event()
    try:
        fut = start_pull(cri, d, f"{slow_registry.host}/x/slow:slow")
        h = wait_for(lambda: helpers(d.pid) or (fut.done() and fut.result()), timeout=60,
                     what="the image helper")[0]
        d.signal(sig)
        d.proc.wait(60)
        with pytest.raises(grpc.RpcError):
            fut.result()
        wait_for(lambda: not alive(h), timeout=30, what="the helper to end")
        if sig == signal.SIGTERM:
            assert d.proc.returncode == 0, d.logtext()
    finally:
        slow_registry.gate = None
        gate.set()


def test_sandbox_holds_against_attacker_code(cri, daemon_factory, kinglet_bin, tmp_path):
    """Attacker code in a helper taken over through a parser bug (the
    sandbox set up by the helper's own code, `--test-attack`): it cannot
    reach the daemon's CRI socket, signal the daemon, pid 1 or a root
    process, or make device nodes in the writable store, yet still
    resolves names and makes TCP connections, fifos and whiteouts."""
    d = daemon_factory([])
    store = os.path.join(d.root, "image")
    victim = subprocess.Popen(["sleep", "600"])
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        steps = {
            "connect-unix": d.sock, "socketpair": "", "raw": "",
            "kill": f"{d.pid}:9", "tkill": d.pid, "tgkill": d.pid, "pidfd-kill": d.pid,
            "setown": d.pid, "fork": "",
            "mknod-b": f"{store}/blk", "mknodat-b": f"{store}/blk2", "mknod-c": f"{store}/chr",
            "mknodat-c": f"{store}/chr2",
            "open-dev": "/dev/null",
            # controls: what a pull needs keeps working
            "tcp": port, "udp": 53, "resolve": "localhost",
            "whiteout": f"{store}/wh", "fifo": f"{store}/fifo",
        }
        seq = [f"{k}:{v}" for k, v in steps.items()]
        seq += ["kill:1:0", f"kill:{victim.pid}:9", f"tkill:{victim.pid}"]
        p = subprocess.run([kinglet_bin, "image-pull", "--test-attack=" + ",".join(seq), store],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        got = [line.split() for line in p.stdout.splitlines()]
        assert [g[0] for g in got] == [s.split(":")[0] for s in seq], p.stdout
        allowed = {"tcp", "udp", "resolve", "whiteout", "fifo"}
        for (verb, result), step in zip(got, seq):
            if verb in allowed:
                assert result == "ok", (step, result)
            else:
                assert result != "ok", (step, result)
        assert alive(d.pid) and victim.poll() is None
        for name in ("blk", "blk2", "chr", "chr2"):
            assert not os.path.lexists(f"{store}/{name}"), name
        st = os.lstat(f"{store}/wh")
        assert stat.S_ISCHR(st.st_mode) and st.st_rdev == 0
        # the daemon still answers
        ims = cri.grpc.ImageServiceStub(channel(d))
        ims.ListImages(cri.pb.ListImagesRequest(), timeout=30)
    finally:
        listener.close()
        victim.kill()
        victim.wait()
        for name in ("blk", "blk2", "chr", "chr2", "wh", "fifo"):
            try:
                os.unlink(f"{store}/{name}")
            except FileNotFoundError:
                pass
    assert d.stop() == 0


def test_sandbox_holds_against_the_kernels_edges(daemon_factory, kinglet_bin, tmp_path):
    """Attacker code in a taken-over helper, past the plain calls: a socket
    family with bits above the int the kernel reads (a unix socket to the
    daemon's CRI socket), a fanotify mark (an O_RDWR descriptor of a file
    the host opens, past the read-only mounts) and open_tree_attr (syscall
    467, a copy of a read-only mount with the flag cleared). The victims
    sit on a tmpfs of the test's own, so a mark covers nothing else."""
    d = daemon_factory([])
    store = os.path.join(d.root, "image")
    fs = tmp_path / "fs"
    fs.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "none", str(fs)], check=True)
    try:
        for name in ("watched", "cloned"):
            (fs / name).write_text("original\n")
        seq = [f"connect-unix-hi:{d.sock}", f"fanotify:{fs}/watched",
               f"open-tree-attr:{fs}/cloned", "tcp:1"]
        p = subprocess.Popen([kinglet_bin, "image-pull", "--test-attack=" + ",".join(seq), store],
                             stdout=subprocess.PIPE, text=True)
        try:
            # the host opens the watched file while the attacker listens
            while p.poll() is None:
                (fs / "watched").read_text()
            out = p.communicate(timeout=60)[0]
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        got = dict(line.split() for line in out.splitlines())
        assert list(got) == [s.split(":")[0] for s in seq], out
        for verb in ("connect-unix-hi", "fanotify", "open-tree-attr"):
            assert got[verb] != "ok", (verb, out)
        assert got["tcp"] == "ECONNREFUSED"  # the control: TCP still made
        for name in ("watched", "cloned"):
            assert (fs / name).read_text() == "original\n", name
    finally:
        subprocess.run(["umount", "-l", str(fs)], check=False)
    assert d.stop() == 0


def test_acquire_flood_stops_the_helper(cri, daemon_factory, monkeypatch):
    """A taken-over helper that asks the daemon for one layer again and
    again (each failed build lets it ask anew): the daemon holds the layer
    once, and past the layer limit of a pull stops the helper and fails the
    pull, saying why; its memory stays where it was. The flood runs in a
    helper the daemon started (KINGLET_TEST_HELPER_ATTACK)."""
    monkeypatch.setenv("KINGLET_TEST_HELPER_ATTACK", "acquire-flood:100000")
    d = daemon_factory([])
    monkeypatch.delenv("KINGLET_TEST_HELPER_ATTACK")
    ims = cri.grpc.ImageServiceStub(channel(d))
    ims.ListImages(cri.pb.ListImagesRequest(), timeout=30)
    with open(f"/proc/{d.pid}/clear_refs", "w") as f:
        f.write("5")  # the peak starts again from here
    base = d.rss_kb()
    with pytest.raises(grpc.RpcError) as e:
        start_pull(cri, d, "127.0.0.1:1/x/flood:1").result()
    peak = int(status_field(d.pid, "VmHWM").split()[0]) - base
    if not d.sanitized():
        assert peak < 2048, f"peak RSS {peak} kB over {base} kB"
    assert "the image helper asked for more than 256 layers, the limit of a pull" in \
        e.value.details(), e.value.details()
    wait_for(lambda: not helpers(d.pid), timeout=30, what="the helper to go")
    # the daemon still answers
    ims.ListImages(cri.pb.ListImagesRequest(), timeout=30)
    assert d.stop() == 0


def proc_state(pid):
    """What a process's neighbour of the same uid could change: its open
    files limit, nice value, scheduling policy, CPU affinity and I/O
    priority."""
    with open(f"/proc/{pid}/limits") as f:
        nofile = re.search(r"^Max open files\s+(\S+)\s+(\S+)", f.read(), re.M).groups()
    with open(f"/proc/{pid}/stat") as f:
        nice = int(f.read().rsplit(")", 1)[1].split()[16])
    ioprio = subprocess.run(["ionice", "-p", str(pid)], capture_output=True,
                            text=True).stdout.strip() if shutil.which("ionice") else None
    return (nofile, nice, os.sched_getscheduler(pid), os.sched_getaffinity(pid), ioprio)


def test_sandbox_cannot_touch_another_helper(daemon_factory, kinglet_bin):
    """Concurrent helpers share one uid, and the kernel lets a process
    change the limits, nice value, scheduling, affinity and I/O priority of
    another of its uid: a taken-over helper cannot, against a second
    process of that uid (a helper of another pull), yet still sets its
    own."""
    d = daemon_factory([])
    store = os.path.join(d.root, "image")
    victim = subprocess.Popen(["sleep", "600"], user=HELPER_UID, group=HELPER_UID,
                              extra_groups=[])
    try:
        before = proc_state(victim.pid)
        v = victim.pid
        theirs = [f"prlimit:{v}", f"setpriority:{v}", f"setpriority-user:{HELPER_UID}",
                  f"sched-setaffinity:{v}", f"sched-setscheduler:{v}", f"sched-setparam:{v}",
                  f"sched-setattr:{v}", f"ioprio:{v}", f"migrate-pages:{v}"]
        # controls: its own (0: the calling thread)
        own = ["prlimit:0", "setpriority:0", "sched-setaffinity:0", "sched-setscheduler:0"]
        seq = theirs + own
        p = subprocess.run([kinglet_bin, "image-pull", "--test-attack=" + ",".join(seq), store],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        got = [line.split() for line in p.stdout.splitlines()]
        assert [g[0] for g in got] == [s.split(":")[0] for s in seq], p.stdout
        for (verb, result), step in zip(got, seq):
            assert result == ("ok" if step in own else "EPERM"), (step, result)
        assert proc_state(victim.pid) == before
    finally:
        victim.kill()
        victim.wait()
    assert d.stop() == 0


def test_sandbox_holds_against_mounts_made_later(daemon_factory, kinglet_bin, tmp_path):
    """Every mount is read-only in the helper, and so must be one the host
    makes while it runs: on a node whose / is shared (systemd's), a
    container's rootfs or a pod's secret volume mounted during a pull
    would otherwise propagate into the helper writable. Here a shared
    tmpfs of the test's own stands for /, and a tmpfs mounted below it once
    the sandbox is up stands for the new mount."""
    d = daemon_factory([])
    store = os.path.join(d.root, "image")
    base = tmp_path / "shared"
    base.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "none", str(base)], check=True)
    later = base / "later"
    try:
        subprocess.run(["mount", "--make-shared", str(base)], check=True)
        later.mkdir()
        go = os.path.join(store, "go")  # a fifo: made once the sandbox is up
        seq = [f"fifo:{go}", f"await:{go}", f"write:{later}/victim"]
        p = subprocess.Popen([kinglet_bin, "image-pull", "--test-attack=" + ",".join(seq), store],
                             stdout=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: os.path.lexists(go), what="the helper's sandbox")
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "none", str(later)],
                           check=True)
            (later / "victim").write_text("original\n")
            # the go-ahead: the helper's open of the fifo returns once a
            # writer opens it (ENXIO until the helper is in that open)
            wait_for(lambda: open_fifo_writer(go), what="the helper to await")
            out = p.communicate(timeout=60)[0]
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        got = dict(line.split() for line in out.splitlines())
        assert got["fifo"] == "ok", out  # the sandbox was up before the mount
        assert got["await"] == "ok", out
        assert got["write"] != "ok", out
        assert (later / "victim").read_text() == "original\n"
    finally:
        subprocess.run(["umount", "-R", "-l", str(base)], check=False)
        try:
            os.unlink(os.path.join(store, "go"))
        except FileNotFoundError:
            pass
    assert d.stop() == 0


def open_fifo_writer(path):
    """Opens and closes the fifo for writing if a reader has it open."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        return True
    except OSError as e:
        if e.errno != errno.ENXIO:
            raise
        return False


def test_sandbox_cannot_freeze_a_filesystem(kinglet_bin, tmp_path):
    """The helper keeps CAP_SYS_ADMIN for unpacking: FIFREEZE on any file
    of a filesystem (the store's, or / through a read-only mount) would
    freeze it for every process of the node, and it stays frozen after
    the helper ends. The victim is an ext4 image of the test's own (tmpfs
    cannot be frozen); the step thaws at once if it froze."""
    if not shutil.which("mkfs.ext4"):
        pytest.skip("needs mkfs.ext4")
    img, mnt = tmp_path / "fs.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(16 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True)
    subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], check=True)
    try:
        store = mnt / "store"
        store.mkdir()
        p = subprocess.run([kinglet_bin, "image-pull", f"--test-attack=fsfreeze:{store}",
                            str(store)], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert p.stdout.split() == ["fsfreeze", "EPERM"], p.stdout
    finally:
        subprocess.run(["fsfreeze", "-u", str(mnt)], capture_output=True)
        subprocess.run(["umount", str(mnt)], check=False)


def test_pull_waiting_for_a_layer_another_pull_builds(cri, daemon_factory):
    """Two pulls share a layer: the second waits for the first one's build
    (src/image/helper.c: converse) and is woken by it, not by a timer; the
    layer is fetched once."""
    a = Image([(Tar().bigfile("big/random.bin", 3 << 20).bytes(), "gzip")])
    blob, _, diff_id = a.layers[0]
    # the same layer, another image (nothing else of b's wakes its job)
    b = Image([(blob, "gzip", diff_id)], user="nobody")
    big_digest = sha256(blob)
    f = FakeRegistry()
    f.gate = threading.Event()  # blobs stall after their first MiB
    f.add_image("a", a)
    f.add_image("b", b)
    f.start()
    try:
        d = daemon_factory(["--insecure-registry", f.host])
        fa = start_pull(cri, d, f"{f.host}/x/y:a")
        wait_for(lambda: any(p.endswith(big_digest) for p in f.blob_gets()), timeout=60,
                 what="the first pull's download of the shared layer")
        fb = start_pull(cri, d, f"{f.host}/x/y:b", timeout=60)
        wait_for(lambda: "y:b`: layer sha256:" in d.logtext()
                 and "is being built by another job: waiting" in d.logtext(), timeout=60,
                 what="the second pull waiting for the shared layer")
        f.gate.set()
        assert fa.result().image_ref == a.id
        assert fb.result().image_ref == b.id
        assert sum(1 for p in f.blob_gets() if p.endswith(big_digest)) == 1, f.blob_gets()
    finally:
        f.stop()
