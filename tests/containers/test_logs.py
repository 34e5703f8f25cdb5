"""CRI logs: the format kubelet reads, long lines, tty output, rotation
through ReopenContainerLog, and a log that cannot keep up."""
import datetime
import os
import re
import threading
import time

import grpc
import pytest

from .conftest import wait_for

RECORD = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z) (stdout|stderr) ([PF]) (.*)$")


def records(path):
    out = []
    with open(path, "rb") as f:
        data = f.read()
    assert data.endswith(b"\n") or not data
    for line in data.split(b"\n")[:-1]:
        m = RECORD.match(line)
        assert m, f"not a CRI log record: {line[:200]!r}"
        out.append((m.group(2).decode(), m.group(3).decode(), m.group(4), m.group(1).decode()))
    return out


def log_path(env, pod, cid):
    return env.status(cid).status.log_path


def test_format_streams_and_order(env):
    pod = env.pod()
    cid = env.run(pod, "log", ["/bin/sh", "-c",
                               "echo one; echo two >&2; printf 'x\\ny\\n'; printf 'tail'"])
    env.wait_exited(cid)
    path = log_path(env, pod, cid)
    assert path == os.path.join(env.logdir, pod[1].metadata.uid, "log/0.log")
    recs = records(path)
    assert [(s, t, c) for s, t, c, _ in recs if s == "stdout"] == [
        ("stdout", "F", b"one"), ("stdout", "F", b"x"), ("stdout", "F", b"y"),
        ("stdout", "P", b"tail")]  # a last line without newline is partial
    assert [(s, t, c) for s, t, c, _ in recs if s == "stderr"] == [("stderr", "F", b"two")]
    st = env.status(cid).status
    for *_, ts in recs:
        t = datetime.datetime.strptime(ts[:26] + "Z", "%Y-%m-%dT%H:%M:%S.%fZ")
        ns = int(t.replace(tzinfo=datetime.timezone.utc).timestamp()) * 10**9 + int(ts[20:29])
        assert st.started_at - 10**9 <= ns <= st.finished_at + 10**9
    assert oct(os.stat(path).st_mode & 0o777) == "0o640"


def test_logs_in_a_pod_wide_pid_namespace(env):
    """shareProcessNamespace (pid POD): the monitor that clones the init
    into the pod's PID namespace still starts its log writer (a thread of a
    process whose children go to another PID namespace cannot be made)."""
    pod = env.pod("shared", pid=env.pb.POD)
    cid = env.run(pod, "log", ["/bin/sh", "-c", "echo from-a-shared-namespace"])
    env.wait_exited(cid)
    assert [(s, c) for s, _, c, _ in records(log_path(env, pod, cid))] == [
        ("stdout", b"from-a-shared-namespace")]


def test_long_lines_are_split(env):
    pod = env.pod()
    cid = env.run(pod, "long", ["/bin/sh", "-c",
                                "head -c 40000 /dev/zero | tr '\\0' a; echo; "
                                "head -c 16384 /dev/zero | tr '\\0' b; echo"])
    env.wait_exited(cid)
    recs = [(t, c) for _, t, c, _ in records(log_path(env, pod, cid))]
    assert [(t, len(c)) for t, c in recs] == [("P", 16384), ("P", 16384), ("F", 40000 - 32768),
                                            ("F", 16384)]
    assert b"".join(c for _, c in recs[:3]) == b"a" * 40000


def test_tty_output_is_stdout(env):
    pod = env.pod()
    cid = env.run(pod, "tty", ["/bin/sh", "-c", "tty; echo err >&2"], tty=True)
    env.wait_exited(cid)
    recs = records(log_path(env, pod, cid))
    assert {s for s, *_ in recs} == {"stdout"}
    text = b"".join(c for _, _, c, _ in recs)
    assert b"/dev/pts/" in text and b"err" in text


def test_stdin_is_held_open(env):
    pb = env.pb
    pod = env.pod()
    with_stdin = env.run(pod, "in", ["/bin/sh", "-c", "read x; echo got $?"], stdin=True)
    without = env.run(pod, "noin", ["/bin/sh", "-c", "read x; echo got $?"])
    env.wait_exited(without)
    assert env.status(with_stdin).status.state == pb.CONTAINER_RUNNING
    assert b"got 1" in b"".join(c for *_, c, _ in records(log_path(env, pod, without)))


def test_rotation_with_reopen(env):
    pb = env.pb
    pod = env.pod()
    cid = env.run(pod, "rot", ["/bin/sh", "-c",
                               "i=0; while true; do echo line$i; i=$((i+1)); sleep 0.01; done"])
    path = log_path(env, pod, cid)
    wait_for(lambda: os.path.exists(path) and len(records(path)) >= 5, what="first lines")
    os.rename(path, path + ".1")
    env.rs.ReopenContainerLog(pb.ReopenContainerLogRequest(container_id=cid), timeout=10)
    wait_for(lambda: os.path.exists(path) and len(records(path)) >= 5, what="lines in the new file")
    old = [c for _, _, c, _ in records(path + ".1")]
    new = [c for _, _, c, _ in records(path)]
    seq = [int(c[4:]) for c in old + new]
    assert seq == list(range(seq[0], seq[0] + len(seq)))  # nothing lost, nothing twice
    env.stop(cid)
    with pytest.raises(grpc.RpcError) as e:
        env.rs.ReopenContainerLog(pb.ReopenContainerLogRequest(container_id=cid), timeout=10)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_reopen_failure_is_reported(env):
    pb = env.pb
    pod = env.pod()
    cid = env.run(pod, "rf", ["/bin/sleep", "1000"])
    path = log_path(env, pod, cid)
    wait_for(lambda: os.path.exists(path), what="the log file")
    logdir = os.path.dirname(path)
    os.rename(path, path + ".1")
    os.rename(logdir, logdir + ".gone")  # kubelet's directory vanished
    try:
        with pytest.raises(grpc.RpcError) as e:
            env.rs.ReopenContainerLog(pb.ReopenContainerLogRequest(container_id=cid), timeout=10)
        # the monitor's errno crosses as a code: NOT_FOUND, its text once
        # (not "...: No such file or directory: Input/output error")
        details = e.value.details()
        assert e.value.code() == grpc.StatusCode.NOT_FOUND, details
        assert details.count("No such file or directory") == 1, details
        assert f"open `{path}`" in details and "Input/output error" not in details, details
    finally:
        os.rename(logdir + ".gone", logdir)


DROPPED = re.compile(rb"\[kinglet: (\d+) bytes of output in (\d+) records were dropped: "
                     rb"the log file could not be written fast enough\]")


def test_a_stalled_log_never_blocks_the_container(env):
    """The log file is a FIFO read at a trickle: the container writes 20 MB
    and exits at once; what could not be written is dropped and counted, in
    marker records that account for every byte the log lacks (but for what
    the monitor's buffer still held when it gave up: 256 KiB)."""
    pb = env.pb
    pod = env.pod()
    lines, width = 20000, 1000
    cfg = env.config("flood", command=["/bin/sh", "-c",
                                       f"head -c {lines * width} /dev/zero | tr '\\0' z | "
                                       f"fold -w {width}; echo done"])
    path = os.path.join(env.logdir, pod[1].metadata.uid, cfg.log_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.mkfifo(path)
    got = bytearray()
    fast = threading.Event()

    def trickle():
        fd = os.open(path, os.O_RDONLY)
        try:
            # at a trickle (80 KB/s: 250 s for it all) until the container
            # is seen exited, then everything until the monitor closes it
            while b := os.read(fd, 4096):
                got.extend(b)
                if not fast.is_set():
                    time.sleep(0.05)  # the stalled reader's pace, not a wait
        finally:
            os.close(fd)
    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    cid = env.create(pod, None, cfg)
    env.start(cid)
    # exited while the reader had taken a fraction: the log never blocked it
    st = env.wait_exited(cid, timeout=120)
    read_at_exit = len(got)
    fast.set()
    t.join(60)
    assert not t.is_alive(), "the monitor kept the log open after the exit"
    assert st.exit_code == 0
    assert read_at_exit < lines * width // 2, read_at_exit
    kept, dropped, markers = 0, 0, 0
    for line in bytes(got).splitlines():
        m = RECORD.match(line)
        assert m, line[:120]
        head = len(line) - len(m.group(4))  # the record's header: timestamp, stream, tag
        if d := DROPPED.fullmatch(m.group(4)):
            assert m.group(2, 3) == (b"stderr", b"F")
            nbytes, nrecords = int(d.group(1)), int(d.group(2))
            assert nrecords > 0 and nbytes > nrecords * (head + 1), line
            dropped += nbytes - nrecords * (head + 1)  # the records' own text
            markers += 1
        else:
            assert m.group(2) == b"stdout" and set(m.group(4)) <= set(b"zdone"), line[:120]
            kept += len(m.group(4))
    assert markers > 0, "no record says what was dropped"
    total = lines * width + len("done")
    assert total - (256 << 10) - (64 << 10) <= kept + dropped <= total, (kept, dropped)
