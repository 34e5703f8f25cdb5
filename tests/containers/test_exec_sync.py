"""ExecSync through the real gRPC client: output, exit codes, the
container's own settings, timeouts, big output, and no leak over many
calls."""
import hashlib
import os
import shutil
import subprocess
import threading
import uuid

import grpc
import pytest

from .conftest import children_of, exe_writable, wait_for
from .test_streaming import exec_url, in_netns, spdyclient  # noqa: F401 (a fixture)
from musl import static_prog


@pytest.fixture(scope="module")
def exec_racer(tmp_path_factory):
    """exec_racer.c, built static."""
    return static_prog(tmp_path_factory, os.path.join(os.path.dirname(__file__), "exec_racer.c"),
                       "racer")


def racer_container(env, racer, out, mode, caps=(), envs=(), **sc):
    """A container whose process is the racer, out mounted at /racer (envs:
    (key, value) pairs of its environment; sc: more of its security
    context)."""
    pb = env.pb
    shutil.copy(racer, out / "racer")
    cid = env.run(env.pod(), "racer", ["/racer/racer", "/racer", *mode],
                  envs=[pb.KeyValue(key=k, value=v) for k, v in envs],
                  mounts=[pb.Mount(container_path="/racer", host_path=str(out))],
                  linux=pb.LinuxContainerConfig(security_context=pb.LinuxContainerSecurityContext(
                      capabilities=pb.Capability(add_capabilities=list(caps)), **sc)))
    wait_for(lambda: (out / "ready").exists(), what="the racer to run")
    return cid


def racer_log(out):
    try:
        return (out / "log").read_text().split("\n")[:-1]  # whole lines only
    except FileNotFoundError:
        return []


def exec_sync(env, cid, cmd, timeout=0):
    return env.rs.ExecSync(env.pb.ExecSyncRequest(container_id=cid, cmd=cmd, timeout=timeout),
                           timeout=max(timeout, 0) + 60)


@pytest.fixture
def running(env):
    pod = env.pod()
    cid = env.run(pod, "x", ["/bin/sleep", "100000"])
    return env, cid


def test_output_and_exit_codes(running):
    env, cid = running
    r = exec_sync(env, cid, ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r.stdout, r.stderr, r.exit_code) == (b"out\n", b"err\n", 3)
    r = exec_sync(env, cid, ["/bin/true"])
    assert (r.stdout, r.stderr, r.exit_code) == (b"", b"", 0)
    r = exec_sync(env, cid, ["/bin/sh", "-c", "kill -9 $$"])
    assert r.exit_code == 137
    r = exec_sync(env, cid, ["/no/such/binary"])
    assert r.exit_code == 127 and b"/no/such/binary" in r.stderr
    r = exec_sync(env, cid, ["/etc/passwd"])
    assert r.exit_code == 126


def test_runs_inside_the_container(running):
    env, cid = running
    r = exec_sync(env, cid, ["/bin/hostname"])
    assert r.stdout == b"p\n"  # the pod's hostname
    # pid 1 of its pid namespace, once the init is past its execve (as with
    # runc, StartContainer answers when the init was told to go)
    wait_for(lambda: exec_sync(env, cid, ["/bin/cat", "/proc/1/cmdline"]).stdout ==
             b"/bin/sleep\x00100000\x00", what="the container's own command as its pid 1")
    r = exec_sync(env, cid, ["/bin/sh", "-c", "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status"])
    assert b"CapEff:\t00000000a80425fb" in r.stdout


def test_timeout_kills(running):
    env, cid = running
    with pytest.raises(grpc.RpcError) as e:
        exec_sync(env, cid, ["/bin/sleep", "1000"], timeout=1)
    # the daemon's answer at the request's timeout, not the client's own
    # deadline (60 s later, which would kill the command too: a cancel)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "timed out after 1 s and was killed" in e.value.details(), e.value.details()
    r = exec_sync(env, cid, ["/bin/sh", "-c", "ps -o comm | grep -c '^sleep$' || true"])
    assert r.stdout.strip() == b"1"  # the container's own sleep only


KUBELET_MAX_MESSAGE = 16 << 20  # what kubelet's gRPC client accepts


def kubelet_stub(env):
    from .conftest import channel
    return env.cri.grpc.RuntimeServiceStub(channel(env.d, **{
        "grpc.max_receive_message_length": KUBELET_MAX_MESSAGE}))


def test_big_output_is_capped(running):
    env, cid = running
    r = kubelet_stub(env).ExecSync(env.pb.ExecSyncRequest(
        container_id=cid, cmd=["/bin/sh", "-c", "head -c 17825792 /dev/zero; echo tail >&2"]),
        timeout=60)
    # the whole answer fits what kubelet reads, and says what was cut
    assert r.ByteSize() <= KUBELET_MAX_MESSAGE
    assert len(r.stdout) >= (16 << 20) - (80 << 10) and r.stdout.count(b"\0") == len(r.stdout)
    # stderr's last word has room after a flood of stdout
    assert r.exit_code == 0 and r.stderr.startswith(b"tail\n"), r.stderr[:200]
    cut = (17825792 - len(r.stdout))
    assert f"output cut: {cut} bytes of stdout and 0 bytes of stderr dropped".encode() in r.stderr


def test_output_is_bounded_across_calls(running):
    """64 calls at once, each printing 16 MiB to stdout and 16 MiB to
    stderr: every answer is one kubelet's client accepts and says it was
    cut, and the daemon's peak RSS stays within 160 MiB of idle (the
    buffers' 64 MiB pool and 64 KiB floors, the connection's queued
    answers, one answer being encoded). A sanitizer build, whose RSS is not
    measured and which reads those 2 GiB several times slower, makes 16:
    still four times what the pool holds."""
    env, cid = running
    calls = 16 if env.d.sanitized() else 64
    rs = kubelet_stub(env)
    cmd = ["/bin/sh", "-c", "head -c 16777216 /dev/zero & head -c 16777216 /dev/zero >&2; wait"]
    exec_sync(env, cid, ["/bin/true"])
    with open(f"/proc/{env.d.pid}/clear_refs", "w") as f:
        f.write("5")  # VmHWM from now on
    idle = env.d.rss_kb()
    results, errors = [], []

    def one():
        try:
            r = rs.ExecSync(env.pb.ExecSyncRequest(container_id=cid, cmd=cmd), timeout=300)
            results.append((r.ByteSize(), r.exit_code, b"output cut" in r.stderr[-300:]))
        except grpc.RpcError as e:
            errors.append(f"{e.code()}: {e.details()}")
    threads = [threading.Thread(target=one) for _ in range(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:4]
    assert len(results) == calls
    for size, code, cut in results:
        assert size <= KUBELET_MAX_MESSAGE and code == 0 and cut, (size, code, cut)
    with open(f"/proc/{env.d.pid}/status") as f:
        peak = next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:"))
    if not env.d.sanitized():
        assert peak - idle <= 160 << 10, (idle, peak)


def sleepers(marker):
    """pids of `sleep <marker>` processes, wherever they run."""
    out = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if f.read() == b"/bin/sleep\0" + marker.encode() + b"\0":
                    out.append(int(p))
        except (OSError, ValueError):
            pass
    return out


def test_cancel_while_starting_kills_the_command(running):
    """Clients that give up (short deadlines) while their commands are being
    started, several at once so some wait for a worker: no command is left
    running."""
    env, cid = running
    marker = str(900000 + os.getpid() % 99999)
    codes = []

    def one(ms):
        try:
            env.rs.ExecSync(env.pb.ExecSyncRequest(container_id=cid, cmd=["/bin/sleep", marker]),
                            timeout=ms / 1000)
            codes.append("OK")
        except grpc.RpcError as e:
            codes.append(e.code())
    for burst in range(10):
        threads = [threading.Thread(target=one, args=(2 + 3 * i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    # every client gave up (a loaded machine may fail one as UNAVAILABLE
    # before its deadline; what counts is that none is left running)
    assert len(codes) == 160 and grpc.StatusCode.DEADLINE_EXCEEDED in codes
    assert set(codes) <= {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE}, set(codes)
    wait_for(lambda: not sleepers(marker), timeout=30, what="every cancelled command to be gone")
    assert exec_sync(env, cid, ["/bin/true"]).exit_code == 0


def test_stopped_container_is_refused(env):
    pod = env.pod()
    cid = env.run(pod, "gone", ["/bin/true"])
    env.wait_exited(cid)
    with pytest.raises(grpc.RpcError) as e:
        exec_sync(env, cid, ["/bin/true"])
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_many_calls_leave_nothing(running):
    env, cid = running
    for _ in range(20):
        exec_sync(env, cid, ["/bin/true"])
    fds, rss = env.d.fd_targets(), env.d.rss_kb()
    for _ in range(300):
        assert exec_sync(env, cid, ["/bin/true"]).exit_code == 0
    # a call's pipes close on the loop's next turn after its answer
    env.d.wait_fds_back(fds, what="the fd count to return")
    if not env.d.sanitized():
        assert env.d.rss_kb() <= rss + 256


def test_relays_cannot_hand_over_the_binary(env, exec_racer, kinglet_bin, tmp_path):
    """ExecSync starts its commands from the daemon itself (no executor
    process) through kinglet-enter, a program run from a sealed memfd
    (CVE-2019-5736): the daemon's /proc/PID/exe is a read-only overlayfs, an
    exec'd command runs that program until its execve, and a command that
    is a `#!/proc/self/exe` script (the exploit's way to run that binary
    inside the container) runs it as its interpreter. A process of the
    container races for every new process, opens its exe with O_PATH while
    it runs a memfd, and writes it once it has exited: it opens the
    helper's, and the seals refuse the write (EPERM, not a mere ETXTBSY)."""
    before = hashlib.sha256(open(kinglet_bin, "rb").read()).hexdigest()
    assert exe_writable(env.d.proc.pid) == (False, "overlayfs")
    out = tmp_path / "racer"
    out.mkdir()
    cid = racer_container(env, exec_racer, out, ["write"])
    # no executor and no relay waits while the command runs: the command
    # is the daemon's own child (the helper is gone)
    slow = threading.Thread(target=exec_sync, args=(env, cid, ["/bin/sleep", "3"]))
    slow.start()
    try:
        kids = wait_for(lambda: (lambda k: k if "sleep" in [c for _, c, _ in k.values()]
                                 else None)(children_of(env.d.proc.pid)),
                        what="the ExecSync command as the daemon's child")
        assert "kinglet" not in [c for _, c, _ in kids.values()], kids
        assert not [c for _, c, _ in kids.values() if "enter" in c], kids
    finally:
        slow.join()
    exec_sync(env, cid, ["/bin/sh", "-c", r"printf '#!/proc/self/exe\n' > /x && chmod +x /x"])
    codes = set()
    try:
        for _ in range(200):
            # the interpreter is kinglet-enter, which runs for kinglet only (2)
            codes.add(exec_sync(env, cid, ["/x"]).exit_code)
            if len(racer_log(out)) >= 3:
                break
    finally:
        (out / "stop").touch()
    log = racer_log(out)
    print(codes, log)
    assert codes == {2}, codes
    assert len(log) >= 3, log
    for line in log:
        assert line.startswith("opened /memfd:kinglet-enter") and " write=EPERM" in line, log
    assert hashlib.sha256(open(kinglet_bin, "rb").read()).hexdigest() == before


def test_commands_that_cannot_run_leave_no_zombie(running):
    """A command whose execve fails reports before its relay has said its
    pid at times; it is still reaped (the daemon is its parent): a zombie
    would hold the container's PID namespace, and its stop, forever."""
    env, cid = running
    for _ in range(100):
        assert exec_sync(env, cid, ["/no/such/binary"]).exit_code == 127

    def zombies():
        return [p for p, (st, _, _) in children_of(env.d.proc.pid).items() if st == "Z"]
    wait_for(lambda: not zombies(), timeout=30, what="the daemon's zombies to be reaped")
    # SIGKILL: done once the namespace is empty, which a zombie would keep
    # from happening (the call's own 30 s deadline bounds the wait)
    env.stop(cid, timeout=0)
    assert env.status(cid).status.state == env.pb.CONTAINER_EXITED


def test_a_ptrace_container_finds_nothing_of_the_daemon(env_factory, exec_racer, tmp_path,
                                                        monkeypatch):
    """CVE-2016-9962 class: a container granted CAP_SYS_PTRACE races every
    process that appears in its PID namespace (the ExecSync commands before
    their execve): it reads their environ, cmdline and every readable byte
    of /proc/PID/mem, and seizes them. The daemon holds a secret in its
    environment (a proxy password) and so in its memory; none of it may be
    found, and the racer must have caught commands before their execve (so
    that the test can fail)."""
    secret = "S3cr3t-" + uuid.uuid4().hex
    monkeypatch.setenv("https_proxy", f"http://user:{secret}@127.0.0.1:9/")
    env = env_factory()
    with open(f"/proc/{env.d.pid}/environ", "rb") as f:
        assert secret.encode() in f.read()  # the daemon has it
    out = tmp_path / "racer"
    out.mkdir()
    cid = racer_container(env, exec_racer, out, ["read", secret[::-1]], caps=["SYS_PTRACE"])

    def probes():
        return [dict(kv.split("=", 1) for kv in line.split()[2:]) for line in racer_log(out)]

    def early(ps):
        # caught before its execve: still running our program
        return [p for p in ps if "kinglet" in p["exe"] and int(p["mem"]) > 0]

    try:
        for i in range(3000):
            r = exec_sync(env, cid, ["/bin/true"])
            assert r.exit_code == 0, r
            ps = probes()
            assert not [p for p in ps if p["secret"] != "-"], [p for p in ps if p["secret"] != "-"]
            if len(early(ps)) >= 5:
                break
    finally:
        (out / "stop").touch()
    ps = probes()
    print(f"{i + 1} ExecSyncs, {len(ps)} probes, {len(early(ps))} before execve: {early(ps)[:3]}")
    assert not [p for p in ps if p["secret"] != "-"], [p for p in ps if p["secret"] != "-"]
    assert len(early(ps)) >= 5, ps[-5:]
    # what it caught holds none of the daemon's environment
    assert all(p["environ"] == "0" for p in early(ps)), early(ps)


def test_commands_run_in_the_container_cgroup_or_not_at_all(running):
    """Item 1 on this host's cgroup2: an exec'd command is in the
    container's cgroup, and when it cannot be started there (here the
    cgroup's directory shadowed by a tmpfs in the daemon's mount namespace,
    so that what the daemon opens is no cgroup) the exec fails with an error
    naming the cgroup and nothing runs; the old code ran the command in the
    daemon's cgroup instead."""
    env, cid = running
    cg = env.cgroup_dir(cid)
    mount = "/sys/fs/cgroup/unified" if os.path.exists("/sys/fs/cgroup/unified/cgroup.procs") \
        else "/sys/fs/cgroup"
    t = threading.Thread(target=exec_sync, args=(env, cid, ["/bin/sleep", "3"]))
    t.start()

    def command():
        for p in open(cg + "/cgroup.procs").read().split():
            try:
                if open(f"/proc/{p}/cmdline", "rb").read() == b"/bin/sleep\x003\x00":
                    return p
            except OSError:
                pass
    try:
        pid = wait_for(command, what="the exec'd command in the container's cgroup")
        with open(f"/proc/{pid}/cgroup") as f:
            assert f"0::{cg[len(mount):]}\n" in f.read()
    finally:
        t.join()
    # from inside: the root of its cgroup namespace, as the container's init
    r = exec_sync(env, cid, ["/bin/sh", "-c", "grep '^0::' /proc/self/cgroup; "
                             "grep '^0::' /proc/1/cgroup"])
    assert r.stdout == b"0::/\n0::/\n", r

    env.d.run("mount", "-t", "tmpfs", "-o", "size=4k", "kinglet-test-shadow", cg)
    try:
        with pytest.raises(grpc.RpcError) as e:
            exec_sync(env, cid, ["/bin/sh", "-c", "touch /ran"])
        print(e.value.code(), e.value.details())
        assert "the container's cgroup" in e.value.details(), e.value.details()
    finally:
        env.d.run("umount", cg)
    assert len(open(cg + "/cgroup.procs").read().split()) == 1  # the init alone
    r = exec_sync(env, cid, ["/bin/sh", "-c", "ls /ran"])
    assert r.exit_code != 0, r  # it never ran


@pytest.mark.parametrize("filtered", [False, True])
def test_a_ptrace_container_cannot_hijack_an_exec_before_it_drops(env, exec_racer, tmp_path,
                                                                  filtered):
    """CVE-2016-9962 class, the other half: a container granted
    CAP_SYS_PTRACE (but not CAP_SYS_ADMIN) seizes every process that appears
    in its PID namespace. An exec'd command it can stop must not hold more
    than the container may: else it injects a syscall the container cannot
    make (here sethostname) and runs it with the daemon's capabilities.
    Filtered (the runtime default with no_new_privs, a late filter), the
    command it stops must already be under the filter, or the container
    could make it run what the filter refuses."""
    out = tmp_path / "racer"
    out.mkdir()
    sc = {}
    if filtered:
        sc = dict(no_new_privs=True, seccomp=env.pb.SecurityProfile(
            profile_type=env.pb.SecurityProfile.RuntimeDefault))
    cid = racer_container(env, exec_racer, out, ["hijack"], caps=["SYS_PTRACE"], **sc)

    def lines():
        return [dict(kv.split("=", 1) for kv in line.split()[2:]) for line in racer_log(out)
                if line.startswith("hijack ")]

    def early(ls):
        # stopped before its execve: still running kinglet-enter's memfd
        return [h for h in ls if h["seized"] == "1" and h["exe"].startswith("/memfd:")]

    try:
        for i in range(300):
            r = exec_sync(env, cid, ["/bin/true"])
            assert r.exit_code == 0, r
            ls = lines()
            if [h for h in ls if int(h["capeff"], 16) >> 21 & 1]:
                break
            if len(early(ls)) >= 5:
                break
        # while the racer runs: it is the container's process, and ends at
        # the stop file
        host = exec_sync(env, cid, ["/bin/cat", "/proc/sys/kernel/hostname"]).stdout
    finally:
        (out / "stop").touch()
    ls = lines()
    print(f"{i + 1} ExecSyncs, {len(ls)} probes, {len(early(ls))} before execve: {early(ls)[:3]}")
    strong = [h for h in ls if int(h["capeff"], 16) >> 21 & 1]
    assert not strong, (strong[:3], host)
    assert b"hijacked" not in host
    assert len(early(ls)) >= 5, ls[-5:]  # else the test could not fail
    if filtered:
        assert all(h["seccomp"] == "2" for h in early(ls)), early(ls)


def test_a_ptrace_container_cannot_name_the_command(env, exec_racer, tmp_path):
    """The command holds the socket kinglet reads its pid from until its
    execve: a container granted CAP_SYS_PTRACE that stops it there and
    injects a pid message naming a process of the host must not have the
    daemon watch that process as the command, or kill it at the
    timeout."""
    victim = subprocess.Popen(["sleep", "600"])
    out = tmp_path / "racer"
    out.mkdir()
    cid = racer_container(env, exec_racer, out, ["forge", str(victim.pid)], caps=["SYS_PTRACE"])

    def sent():
        return [line for line in racer_log(out) if " injected=8 " in line]

    try:
        for i in range(100):
            try:
                exec_sync(env, cid, ["/bin/sleep", "2"], timeout=1)
            except grpc.RpcError:
                pass
            assert victim.poll() is None, f"the host's process was killed: {sent()}"
            if len(sent()) >= 3:
                break
    finally:
        (out / "stop").touch()
        alive = victim.poll() is None
        victim.kill()
        victim.wait()
    print(f"{i + 1} ExecSyncs, forged: {sent()}")
    assert alive
    assert len(sent()) >= 3, racer_log(out)[-5:]  # else the test could not fail


def hold_caps():
    """What the `hold` racer needs to trace a command of its uid."""
    try:
        scope = int(open("/proc/sys/kernel/yama/ptrace_scope").read())
    except FileNotFoundError:
        scope = 0  # no Yama: same uid is enough
    if scope == 3:
        pytest.skip("Yama's ptrace_scope 3 forbids every attach")
    return ["SYS_PTRACE"] if scope else []  # what Yama asks of a tracer that is no ancestor


def test_a_command_held_by_a_tracer_does_not_spin_the_loop(env, exec_racer, tmp_path):
    """A process of the container (no capability where Yama does not ask
    for one: same uid, and the command is dumpable once it has exec'd)
    seizes an ExecSync command and never waits for it. Once the command
    ends its pidfd is readable, but the zombie is the tracer's to reap
    until the tracer lets go: the daemon's loop must not keep polling it
    (level-triggered, it would run at 100% CPU and never sleep), and it
    reaps and answers once the tracer ends."""
    out = tmp_path / "racer"
    out.mkdir()
    cid = racer_container(env, exec_racer, out, ["hold"], caps=hold_caps())
    result = []
    t = threading.Thread(target=lambda: result.append(exec_sync(env, cid, ["/bin/sleep", "1"])))
    t.start()
    try:
        wait_for(lambda: [ln for ln in racer_log(out) if ln.startswith("held ")],
                 what="the racer to seize the command")
        wait_for(lambda: [p for p, (st, comm, _) in children_of(env.d.pid).items()
                          if st == "Z" and comm == "sleep"],
                 what="the command to end, held by the racer")
        samples = []

        def loop_sleeps():
            # the loop's thread (the main one) seen asleep, several times in
            # a row: a thread that spins is always running
            with open(f"/proc/{env.d.pid}/task/{env.d.pid}/stat") as f:
                samples.append(f.read().rsplit(")", 1)[1].split()[0])
            return samples[-5:] == ["S"] * 5
        wait_for(loop_sleeps, timeout=30, interval=0.05, what="the daemon's loop to sleep")
    finally:
        (out / "stop").touch()
        t.join()
    assert result and result[0].exit_code == 0, result
    wait_for(lambda: not [p for p, (st, _, _) in children_of(env.d.pid).items() if st == "Z"],
             what="the daemon's zombies to be reaped")


def raw_exec_sync(sock_path, request):
    """An ExecSync call over its own HTTP/2 connection from a client that
    never reads its socket (a 4 KiB receive buffer): the answer stays
    queued in the daemon. Returns the socket."""
    import socket
    import h2.config
    import h2.connection
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(sock_path)
    h = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    h.initiate_connection()
    h.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path",
                   "/runtime.v1.RuntimeService/ExecSync"), (":authority", "localhost"),
                   ("content-type", "application/grpc"), ("te", "trailers")])
    body = request.SerializeToString()
    h.send_data(1, b"\0" + len(body).to_bytes(4, "big") + body, end_stream=True)
    s.sendall(h.data_to_send())
    return s


def test_answers_nobody_reads_are_bounded(running):
    """64 ExecSync calls, each on its own connection whose client never
    reads, each printing 16 MiB: while and after they run, a probe on
    another connection gets its answer, and the daemon's peak RSS stays
    within the bounds that add up (the gRPC server's 256 MiB of queued
    answers, the 64 MiB pool and the floors, an answer being encoded)."""
    env, cid = running
    exec_sync(env, cid, ["/bin/true"])
    with open(f"/proc/{env.d.pid}/clear_refs", "w") as f:
        f.write("5")  # VmHWM from now on
    idle = env.d.rss_kb()
    marker = uuid.uuid4().hex
    cmd = ["/bin/sh", "-c", f"head -c 16777216 /dev/zero; : {marker}"]

    def running_commands():
        n = 0
        for p in os.listdir("/proc"):
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    n += marker.encode() in f.read()
            except OSError:
                pass
        return n
    socks = [raw_exec_sync(env.d.sock, env.pb.ExecSyncRequest(container_id=cid, cmd=cmd,
                                                              timeout=300))
             for _ in range(64)]
    try:
        wait_for(lambda: running_commands() > 0, what="the commands to start", timeout=60)

        def probe():
            assert exec_sync(env, cid, ["/bin/echo", "probe"]).stdout == b"probe\n"
            return running_commands() == 0
        wait_for(probe, what="every command to end", timeout=300, interval=0.2)
        assert exec_sync(env, cid, ["/bin/echo", "probe"]).stdout == b"probe\n"
        with open(f"/proc/{env.d.pid}/status") as f:
            peak = next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:"))
        print(f"64 answers nobody reads: RSS {idle} kB, peak {peak} kB")
    finally:
        for s in socks:
            s.close()
    if not env.d.sanitized():
        assert peak - idle <= (256 + 64 + 16 + 32) << 10, (idle, peak)


POOL_WORKERS = 4  # the daemon keeps libuv's default thread pool (no UV_THREADPOOL_SIZE)
HELD = 2 * POOL_WORKERS


# A PATH of 8000 missing directories, which the command looks through
# before its execve: the racer, which may wait for a core on a busy
# machine, has time to find it there.
SLOW_PATH = [("PATH", ":".join(f"/n/{i}" for i in range(8000)).encode() + b":/bin")]


def stalled(out):
    """The commands the racer stopped before their execve, by pid."""
    return {ln.split()[1] for ln in racer_log(out) if ln.startswith("stalled ")}


def serves_at_once(env):
    """A pod starts (its work needs the thread pool) and the containers are
    listed, each well within what kubelet waits."""
    env.pod("q", timeout=20)
    env.list()


def reaped_all(env):
    wait_for(lambda: not [p for p, (st, _, _) in children_of(env.d.pid).items()
                          if st in ("Z", "t")],
             what="the daemon's commands to be reaped once the racer let go")


def test_commands_stopped_before_their_execve_hold_no_worker(env, exec_racer, tmp_path):
    """A container granted CAP_SYS_PTRACE stops each ExecSync command
    before its execve (where it still holds the socket the daemon learns of
    the execve from) and never lets it go, nor its zombie once killed.
    Each call is still answered at its timeout, and with more such calls
    than the thread pool has workers the daemon still starts pods."""
    out = tmp_path / "racer"
    out.mkdir()
    cid = racer_container(env, exec_racer, out, ["stall"], caps=["SYS_PTRACE"], envs=SLOW_PATH)
    codes, threads = [], []

    def one():
        try:
            exec_sync(env, cid, ["sleep", "1000"], timeout=1)
            codes.append("OK")
        except grpc.RpcError as e:
            codes.append(e.code())
    try:
        for _ in range(10):
            batch = [threading.Thread(target=one) for _ in range(HELD)]
            for t in batch:
                t.start()
            threads += batch
            wait_for(lambda: len(codes) == len(threads), timeout=30,
                     what="every ExecSync to be answered at its timeout")
            if len(stalled(out)) >= HELD:
                break
        assert set(codes) == {grpc.StatusCode.DEADLINE_EXCEEDED}, codes
        assert len(stalled(out)) >= HELD, racer_log(out)[-5:]  # else the test could not fail
        serves_at_once(env)  # the racer still holds them all
    finally:
        (out / "stop").touch()
        for t in threads:
            t.join()
    reaped_all(env)


def test_streaming_execs_stopped_before_their_execve_hold_no_worker(env, exec_racer, spdyclient,
                                                                     tmp_path):
    """The same racer against streaming execs whose clients go away while
    their commands are stopped: each command is killed and its session
    ends, and with more such sessions than the thread pool has workers the
    daemon still starts pods."""
    out = tmp_path / "racer"
    out.mkdir()
    cid = racer_container(env, exec_racer, out, ["stall"], caps=["SYS_PTRACE"], envs=SLOW_PATH)

    def commands():
        return {p: st for p, (st, comm, _) in children_of(env.d.pid).items()
                if comm != "kinglet-monitor"}
    clients = []
    try:
        for _ in range(5 * HELD):
            if len(stalled(out)) >= HELD:
                break
            before = set(commands())
            proc = subprocess.Popen(in_netns(env, [spdyclient, "exec", exec_url(
                env, cid, ["sleep", "1000"])]), stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL)
            clients.append(proc)
            # stopped by the racer, or (it came too late) run
            wait_for(lambda: set(commands()) - before, timeout=30,
                     what="the exec's command to start")
            proc.kill()
            proc.wait()
        assert len(stalled(out)) >= HELD, racer_log(out)[-5:]  # else the test could not fail
        # every command was killed, stopped or not: none runs, none is stopped
        wait_for(lambda: set(commands().values()) <= {"Z"}, timeout=30,
                 what="every command to be killed")
        serves_at_once(env)  # the racer still holds the stopped ones' zombies
    finally:
        (out / "stop").touch()
        for proc in clients:
            proc.kill()
            proc.wait()
    reaped_all(env)


def test_a_command_held_by_a_tracer_is_answered_at_its_timeout(env, exec_racer, tmp_path):
    """The command ends in time, but a process of the container holds its
    zombie (see above), so its exit code cannot be had: the call is
    answered at its timeout all the same, while the racer still holds it,
    and the command is reaped once the racer lets go."""
    out = tmp_path / "racer"
    out.mkdir()
    cid = racer_container(env, exec_racer, out, ["hold"], caps=hold_caps())
    # the command (the first new process, the one the racer holds) ends
    # only once the racer says it holds it, however late that comes
    cmd = ["/bin/sh", "-c", "until grep -q '^held ' /racer/log; do sleep 0.01; done"]
    try:
        with pytest.raises(grpc.RpcError) as e:
            env.rs.ExecSync(env.pb.ExecSyncRequest(container_id=cid, cmd=cmd, timeout=10),
                            timeout=60)
        # the daemon's answer, not the client's own deadline
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "timed out after 10 s" in e.value.details(), e.value.details()
        held = [ln for ln in racer_log(out) if ln.startswith("held ")]
        assert held, racer_log(out)  # else the test could not fail
        assert [p for p, (st, comm, _) in children_of(env.d.pid).items()
                if st == "Z" and comm == "sh"]  # still the racer's
    finally:
        (out / "stop").touch()
    reaped_all(env)
