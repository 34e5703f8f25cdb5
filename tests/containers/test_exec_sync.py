"""ExecSync through the real gRPC client: output, exit codes, the
container's own settings, timeouts, big output, and no leak over many
calls."""
import hashlib
import threading
import time

import grpc
import pytest

from .conftest import children_of, exe_writable, wait_for


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
    r = exec_sync(env, cid, ["/bin/sh", "-c", "hostname; cat /proc/1/cmdline"])
    lines = r.stdout.split(b"\n")
    assert lines[0] == b"p"  # the pod's hostname
    assert lines[1] == b"/bin/sleep\x00100000\x00"  # pid 1 of its pid namespace
    r = exec_sync(env, cid, ["/bin/sh", "-c", "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status"])
    assert b"CapEff:\t00000000a80425fb" in r.stdout


def test_timeout_kills(running):
    env, cid = running
    t0 = time.monotonic()
    with pytest.raises(grpc.RpcError) as e:
        exec_sync(env, cid, ["/bin/sleep", "1000"], timeout=1)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - t0 < 100  # not the command's 1000 s: it was killed
    r = exec_sync(env, cid, ["/bin/sh", "-c", "ps -o comm | grep -c '^sleep$' || true"])
    assert r.stdout.strip() == b"1"  # the container's own sleep only


def test_big_output_is_capped(running):
    env, cid = running
    from .conftest import channel
    rs = env.cri.grpc.RuntimeServiceStub(channel(env.d, **{
        "grpc.max_receive_message_length": 64 << 20}))
    r = rs.ExecSync(env.pb.ExecSyncRequest(
        container_id=cid, cmd=["/bin/sh", "-c", "head -c 17825792 /dev/zero; echo tail >&2"]),
        timeout=60)
    assert len(r.stdout) == 16 << 20 and r.exit_code == 0 and r.stderr == b"tail\n"


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
    fds, rss = len(env.d.fds()), env.d.rss_kb()
    for _ in range(300):
        assert exec_sync(env, cid, ["/bin/true"]).exit_code == 0
    # a call's pipes close on the loop's next turn after its answer
    wait_for(lambda: len(env.d.fds()) <= fds, what="the fd count to return")
    if not env.d.sanitized():
        assert env.d.rss_kb() <= rss + 256


def test_relays_cannot_hand_over_the_binary(running, kinglet_bin):
    """ExecSync forks its relay from the daemon itself (no executor
    process), so the daemon runs from a sealed view of its binary
    (CVE-2019-5736): the daemon's (so every relay's) /proc/PID/exe is a
    read-only overlayfs, and a command that is a `#!/proc/self/exe` script
    (the exploit's way to run the relay's binary inside the container), while
    a process of the container races to open every new process's exe and
    write it afterwards, writes nothing of the host."""
    env, cid = running
    before = hashlib.sha256(open(kinglet_bin, "rb").read()).hexdigest()
    assert exe_writable(env.d.proc.pid) == (False, "overlayfs")
    # no executor and no relay waits while the command runs: the command
    # is the daemon's own child (the relay, a copy of the daemon, is gone)
    slow = threading.Thread(target=exec_sync, args=(env, cid, ["/bin/sleep", "3"]))
    slow.start()
    try:
        kids = wait_for(lambda: (lambda k: k if "sleep" in [c for _, c, _ in k.values()]
                                 else None)(children_of(env.d.proc.pid)),
                        what="the ExecSync command as the daemon's child")
        assert "kinglet" not in [c for _, c, _ in kids.values()], kids
    finally:
        slow.join()
    # the exploit: the container races for the process a script starts
    exec_sync(env, cid, ["/bin/sh", "-c", r"""
        printf '#!/proc/self/exe\n' > /x && chmod +x /x
        (while [ ! -e /stop ]; do
            for d in /proc/[0-9]*; do
                read c < $d/comm 2>/dev/null || continue
                [ "$c" = x ] || continue
                if exec 3< $d/exe; then
                    echo opened >> /log
                    while [ -d $d ]; do :; done
                    echo pwned >> /proc/self/fd/3 && echo WROTE >> /log
                    exec 3<&-
                fi
            done
        done) > /dev/null 2>&1 &
        """])
    codes = {exec_sync(env, cid, ["/x"]).exit_code for _ in range(40)}
    exec_sync(env, cid, ["/bin/touch", "/stop"])
    log = exec_sync(env, cid, ["/bin/sh", "-c", "cat /log 2>/dev/null; true"]).stdout
    # the kernel refuses the interpreter (its mount is not in the
    # container's namespace: 127), or the sealed view runs (kinglet's usage
    # error, 2); neither can be written
    assert codes and codes <= {2, 126, 127}, codes
    assert b"WROTE" not in log, log
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
