"""The container monitor's attach protocol (ctl.sock), spoken directly as
the daemon's streaming server will: output fan-out, stdin, stdin_once,
resize, and a client that stops reading pausing the container, not the
monitor's memory."""
import fcntl
import json
import os
import socket
import struct
import termios

import pytest

from .conftest import wait_for

OUT, ERR, IN, CLOSE, RESIZE = 1, 2, 0, 3, 4


def connect(env, cid, what):
    """A client of the monitor's ctl.sock and the monitor's answer."""
    d = os.open(os.path.join(env.d.state, "oci", cid), os.O_PATH | os.O_DIRECTORY)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(f"/proc/self/fd/{d}/ctl.sock")
    finally:
        os.close(d)
    s.send(b"attach " + what.encode())
    s.settimeout(10)
    return s, s.recv(100)


def attach(env, cid, what="stdin stdout stderr"):
    s, answer = connect(env, cid, what)
    assert answer == b"ok", answer
    return s


def read_until(s, want, tag=OUT):
    got = b""
    while want not in got:
        pkt = s.recv(65536)
        assert pkt, f"EOF before {want!r}; got {got!r}"
        if pkt[0] == tag:
            got += pkt[1:]
    return got


def test_attach_stdin_and_output(env):
    pod = env.pod()
    cid = env.run(pod, "cat", ["/bin/sh", "-c", "cat; echo bye >&2"], stdin=True)
    s = attach(env, cid)
    s.send(bytes([IN]) + b"hello\n")
    assert b"hello\n" in read_until(s, b"hello\n")
    s2 = attach(env, cid, "stdout")  # a second client sees output too
    s.send(bytes([IN]) + b"again\n")
    read_until(s, b"again\n")
    read_until(s2, b"again\n")
    # without stdin_once the end of a client's input ends its session, not
    # the container's stdin: the next client's input still goes in
    s.send(bytes([CLOSE]))
    assert s.recv(100) == b""
    s.close()
    s3 = attach(env, cid, "stdin")
    s3.send(bytes([IN]) + b"third\n")
    read_until(s2, b"third\n")
    assert env.status(cid).status.state == env.pb.CONTAINER_RUNNING
    s3.close()
    s2.close()
    log = open(env.status(cid).status.log_path, "rb").read()
    assert b"stdout F hello" in log and b"stdout F third" in log


def test_stdin_once_close_ends_the_containers_stdin(env):
    pod = env.pod()
    cid = env.run(pod, "cat", ["/bin/sh", "-c", "cat; echo bye >&2"], stdin=True,
                  stdin_once=True)
    s = attach(env, cid)
    s.send(bytes([IN]) + b"hello\n")
    read_until(s, b"hello\n")
    s.send(bytes([CLOSE]))  # stdin_once: the container's stdin closes, we stay
    assert b"bye" in read_until(s, b"bye", ERR)
    env.wait_exited(cid)
    assert s.recv(100) == b""  # EOF once the container is gone
    s.close()


def test_stdin_once_closes_on_detach(env):
    pod = env.pod()
    cid = env.run(pod, "once", ["/bin/sh", "-c", "cat; echo done; exec sleep 100000"],
                  stdin=True, stdin_once=True)
    watch = attach(env, cid, "stdout")  # sees the output, holds no stdin
    s = attach(env, cid)
    s.send(bytes([IN]) + b"x\n")
    read_until(s, b"x\n")
    s.close()  # the first client's detach (no CLOSE sent) ends stdin: cat ends
    read_until(watch, b"done\n")
    # a later client cannot have stdin any more, while the container runs on
    s2, answer = connect(env, cid, "stdin stdout")
    assert answer == b"error stdin is closed", answer
    s2.close()
    assert env.status(cid).status.state == env.pb.CONTAINER_RUNNING
    assert attach(env, cid, "stdout")  # output only is still served
    watch.close()


def test_tty_resize(env):
    pod = env.pod()
    cid = env.run(pod, "tty", ["/bin/sh", "-c", "read x; stty size; read y"], tty=True,
                  stdin=True)
    s = attach(env, cid, "stdin stdout")
    s.send(bytes([RESIZE]) + b"123 45")
    s.send(bytes([IN]) + b"go\r")
    assert b"45 123" in read_until(s, b"45 123")
    s.send(bytes([IN]) + b"end\r")
    env.wait_exited(cid)
    s.close()


def test_tty_close_ends_the_session_not_the_terminal(env):
    pod = env.pod()
    cid = env.run(pod, "tty", ["/bin/sh", "-c", "read x; echo got $x; read y"], tty=True,
                  stdin=True)
    s = attach(env, cid, "stdin stdout")
    s.send(bytes([CLOSE]))  # no ^D to the shell: only this client leaves
    assert s.recv(100) == b""
    s.close()
    s = attach(env, cid, "stdin stdout")
    s.send(bytes([IN]) + b"a\r")
    read_until(s, b"got a")
    s.send(bytes([IN]) + b"end\r")
    env.wait_exited(cid)
    s.close()


def stdout_backlog(pid):
    """Bytes waiting in the pipe that is process pid's stdout, and the
    pipe's size (through a reading end of that pipe that never reads)."""
    fd = os.open(f"/proc/{pid}/fd/1", os.O_RDONLY | os.O_NONBLOCK)
    try:
        n = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
        return n, fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    finally:
        os.close(fd)


def test_a_client_that_does_not_read_pauses_the_container(env):
    pod = env.pod()
    cid = env.run(pod, "flood", ["/bin/sh", "-c",
                                 "i=0; while true; do echo line$i; i=$((i+1)); done"])
    s = attach(env, cid, "stdout")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    mon = env.monitors()[0]
    pid = int(json.loads(env.status(cid, verbose=True).info["info"])["pid"])

    def rss():
        return int([l for l in open(f"/proc/{mon}/status") if l.startswith("VmRSS")][0].split()[1])

    def pipe_full():
        n, size = stdout_backlog(pid)
        # every page of the pipe taken: short lines leave under a line's
        # length unused in each of its 16 pages
        return size - n < 512
    # paused: the monitor stops reading the container's output, whose pipe
    # fills (a monitor that buffered without bound would drain it)
    wait_for(pipe_full, what="the container's stdout pipe to fill")
    r1 = rss()
    log = env.status(cid).status.log_path
    n1 = os.path.getsize(log)
    # the monitor goes on serving other clients meanwhile, and still does
    # not read: 20 attach handshakes answered after the pipe was full
    for _ in range(20):
        attach(env, cid, "stdout").close()
    assert pipe_full()
    assert os.path.getsize(log) - n1 < 200000
    assert rss() < r1 + 512
    # reading again lets the container go on
    import threading
    stop = threading.Event()

    def drain():
        while not stop.is_set():
            try:
                s.recv(65536)
            except OSError:
                return
    t = threading.Thread(target=drain, daemon=True)
    t.start()
    wait_for(lambda: os.path.getsize(log) > n1 + 200000, what="the output to flow again")
    stop.set()
    t.join(10)
    s.close()
    wait_for(lambda: os.path.getsize(log) > n1 + 1000000, what="the output without client")


def test_a_clients_last_output_is_delivered_at_exit(env):
    """The container ends while an attached client has not taken its
    output: the client's socket is full, a packet waits for it, and the
    container's stdout pipe is full too. The monitor waits for the client's
    room (not a fixed number of short sleeps) and sends the rest in order:
    what the client then reads is seq's output from the start, without a
    gap, down to what the pipe held when the container ended."""
    pod = env.pod()
    cid = env.run(pod, "last", ["/bin/sh", "-c",
                                "read x; seq 1 100000000 & read y; kill -9 $!; exit 0"],
                  stdin=True)
    s = attach(env, cid, "stdin stdout")
    pid = int(json.loads(env.status(cid, verbose=True).info["info"])["pid"])
    s.send(bytes([IN]) + b"go\n")

    def pipe_full():
        n, size = stdout_backlog(pid)
        return size - n < 512
    # not reading: the socket fills, a packet waits, seq fills the pipe
    wait_for(pipe_full, what="the container's stdout pipe to fill")
    s.send(bytes([IN]) + b"end\n")
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), what="the container's init to end")
    got = b""
    while True:
        pkt = s.recv(65536)
        if not pkt:
            break
        assert pkt[0] == OUT, pkt[:20]
        got += pkt[1:]
    s.close()
    want_end = got.rsplit(b"\n", 1)[0].rsplit(b"\n", 1)[-1]
    want = b"".join(b"%d\n" % i for i in range(1, int(want_end) + 2))
    assert want.startswith(got), "a gap in the output: the first difference at byte %d" % next(
        i for i in range(min(len(got), len(want))) if got[i] != want[i])
    assert len(got) > 65536 + 16384, len(got)  # the pipe's content and the packet that waited
    env.wait_exited(cid)
