"""What a client can make the gRPC endpoint hold, and for how long
(docs/architecture.md, "The gRPC server"). Each attack test is a scaled-down
reproduction of one that once worked (issue 9): it fails on a server without
the limit and passes with it. The frame-level client (h2client.Frames)
sends what a well-behaved HTTP/2 library would refuse to."""
import os
import resource
import struct
import subprocess
import threading
import time

import grpc
import pytest

from .conftest import channel, wait_for
from .h2client import (CONTINUATION, DATA, END_STREAM, HEADERS, INITIAL_WINDOW_SIZE, PING,
                       RST_STREAM, SETTINGS, WINDOW_UPDATE, Frames, Raw, frame, h2frame)

RS = "/runtime.v1.RuntimeService/"
MiB = 1 << 20
OK, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED = 0, 4, 8
PROTOCOL_ERROR, REFUSED_STREAM, ENHANCE_YOUR_CALM = 1, 7, 11


def runtime(cri, d):
    return cri.grpc.RuntimeServiceStub(channel(d))


class Rss:
    """RSS growth of a daemon since it was made. Measured on plain builds
    only (a sanitizer's shadow memory and quarantine count in VmRSS): under
    a sanitizer every bound holds, and the rest of each test still runs."""

    def __init__(self, d):
        self.d = d
        self.plain = not d.sanitized()
        self.base = d.rss_kb()

    def below(self, kb):
        grew = self.d.rss_kb() - self.base
        assert not self.plain or grew < kb, f"RSS grew by {grew} kB (bound {kb} kB)"
        return True


def ping(f, timeout=60.0):
    """A PING round trip: the server has handled every frame sent before."""
    before = f.pings_acked
    f.send(h2frame(PING, 0, 0, b"syncsync"))
    f.pump(lambda: f.pings_acked > before, timeout)


def rpc_count(d, method):
    return d.logtext().count(f"rpc {RS}{method} ")


def raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < n:
        pytest.skip(f"needs {n} file descriptors, the hard limit is {hard}")
    if soft != resource.RLIM_INFINITY and soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))


# ---- item 3: responses a client never reads --------------------------------

@pytest.fixture
def big_pods(cri, pod_daemon_factory):
    """A daemon with host-network pods whose 400 KB annotations make each
    ListPodSandbox answer large; the pods are removed afterwards."""
    made = []

    def make(n, extra_args=()):
        d = pod_daemon_factory(["--pod-network", "none", *extra_args])
        rs = runtime(cri, d)
        pb = cri.pb
        for i in range(n):
            cfg = pb.PodSandboxConfig(
                metadata=pb.PodSandboxMetadata(name=f"big{i}", namespace="default",
                                               uid=f"uid-big-{i}", attempt=0),
                annotations={"a": "y" * (400 << 10)},
                linux=pb.LinuxPodSandboxConfig(security_context=pb.LinuxSandboxSecurityContext(
                    namespace_options=pb.NamespaceOption(network=pb.NODE))))
            pid = rs.RunPodSandbox(pb.RunPodSandboxRequest(config=cfg), timeout=60).pod_sandbox_id
            made.append((d, pid))
        size = len(rs.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).SerializeToString())
        return d, size
    yield make
    for d, pid in made:
        if d.proc.poll() is None:
            rs = runtime(cri, d)
            rs.StopPodSandbox(cri.pb.StopPodSandboxRequest(pod_sandbox_id=pid), timeout=60)
            rs.RemovePodSandbox(cri.pb.RemovePodSandboxRequest(pod_sandbox_id=pid), timeout=60)


def unread_calls(cri, d, n):
    """A connection with an HTTP/2 window of 0 that sends n ListPodSandbox
    calls and takes none of the answers."""
    f = Frames(d.sock, settings=[(INITIAL_WINDOW_SIZE, 0)])
    body = frame(cri.pb.ListPodSandboxRequest().SerializeToString())
    sids = [f.request(RS + "ListPodSandbox", body)[0] for _ in range(n)]
    ping(f)
    return f, sids


def test_unread_responses_are_bounded_per_connection(cri, big_pods):
    d, size = big_pods(4, ["--grpc-stall-timeout", "3"])
    assert size > 1_500_000
    budget = 32 * MiB  # the default per connection
    rss, served0 = Rss(d), rpc_count(d, "ListPodSandbox")
    f, sids = unread_calls(cri, d, 60)  # 96 MB of answers
    served = rpc_count(d, "ListPodSandbox") - served0
    # The calls past the budget wait, unserved, in order.
    assert served <= budget // size + 1, served
    rss.below((budget + 2 * size) // 1024 + 8 * 1024)
    # A client on another connection is served meanwhile.
    assert runtime(cri, d).Version(cri.pb.VersionRequest(), timeout=5).runtime_name == "kinglet"
    # The client opens its window: every call is answered, in full.
    f.send(h2frame(SETTINGS, 0, 0, struct.pack(">HI", INITIAL_WINDOW_SIZE, (1 << 31) - 1)) +
           h2frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", (1 << 31) - 1 - 65535)))
    f.pump(lambda: all(f.streams[s]["ended"] for s in sids), timeout=30)
    for s in sids:
        assert Frames.status(f.streams[s]) == OK and f.streams[s]["data"] == size + 5
    f.close()

    # A connection that never takes its answers is closed once it stalls
    # (3 s): not before, counted from before the connection was opened, and
    # at all (wait_closed's own bound is generous: a busy machine).
    t0 = time.monotonic()
    f, sids = unread_calls(cri, d, 60)
    f.wait_closed(timeout=60)
    assert time.monotonic() - t0 > 2.5
    assert f.goaway and f.goaway[1] == ENHANCE_YOUR_CALM
    assert "took none of its" in d.logtext()
    f.close()
    wait_for(lambda: rss.below(16 * 1024), what="the answers' memory to be freed")


def test_unread_responses_are_bounded_daemon_wide(cri, big_pods):
    d, size = big_pods(3, ["--grpc-response-memory", "8M",
                           "--grpc-connection-response-memory", "4M"])
    rss = Rss(d)
    conns = [unread_calls(cri, d, 10)[0] for _ in range(4)]  # 4 x 12 MB of answers
    rss.below((8 * MiB + 2 * size) // 1024 + 8 * 1024)
    # Room is made by closing the connections that hold the most.
    assert "closing a connection holding" in d.logtext()
    # A client that reads is served, big answers included.
    rs = runtime(cri, d)
    assert len(rs.ListPodSandbox(cri.pb.ListPodSandboxRequest(), timeout=10).items) == 3
    rss.below((8 * MiB + 2 * size) // 1024 + 8 * 1024)
    for f in conns:
        f.close()


# ---- item 4: requests that start and never finish --------------------------

def test_unfinished_requests_time_out_and_are_capped(cri, daemon_factory):
    d = daemon_factory(["--grpc-request-timeout", "3", "--grpc-request-memory", "16M"])
    rss = Rss(d)
    # 16 connections, 4 streams each, each stream announcing a 16 MiB message
    # and sending 1000 KiB of it (what the stream window allows): 64 MiB.
    conns = []
    part = struct.pack(">BI", 0, 16 * MiB) + b"x" * (1000 * 1024 - 5)
    t0 = time.monotonic()
    for _ in range(16):
        f = Frames(d.sock)
        for _ in range(4):
            f.request(RS + "Version", part, end=False)
        ping(f)
        conns.append(f)
    rss.below(16 * 1024 + 12 * 1024)
    refused = [st for f in conns for st in f.streams.values() if st["ended"]]
    assert refused and all(Frames.status(st) == RESOURCE_EXHAUSTED for st in refused)
    # A well-behaved client is served while the cap is reached.
    assert runtime(cri, d).Version(cri.pb.VersionRequest(), timeout=5).runtime_name == "kinglet"
    # Every unfinished request ends once its time is up.
    for f in conns:
        f.pump(lambda: all(st["ended"] for st in f.streams.values()), timeout=60)
    assert time.monotonic() - t0 > 2.5
    ended = [st for f in conns for st in f.streams.values() if st not in refused]
    assert ended and all(Frames.status(st) == DEADLINE_EXCEEDED for st in ended)
    for f in conns:
        f.close()


# ---- item 5: connections that hold a slot and do nothing --------------------

def test_full_connection_table_still_serves_a_new_client(cri, daemon_factory):
    d = daemon_factory(["--grpc-max-connections", "40"])
    idle = []
    for _ in range(45):  # the preface, then nothing
        idle.append(Frames(d.sock))
        ping(idle[-1])
    # Each connection past the limit took the place of the one idle the
    # longest, and so does a real client.
    assert runtime(cri, d).Version(cri.pb.VersionRequest(), timeout=5).runtime_name == "kinglet"
    for f in idle[:6]:
        f.wait_closed(timeout=60)
        assert f.goaway == (0, 0)
    for f in idle[6:]:
        ping(f)  # still served
        f.close()


def test_full_table_of_busy_connections_refuses_new_ones(cri, daemon_factory):
    d = daemon_factory(["--grpc-max-connections", "20"])
    busy = []
    for _ in range(20):
        f = Frames(d.sock)
        f.request(RS + "Version", None, end=False)  # a call in progress
        ping(f)
        busy.append(f)
    late = Frames(d.sock)
    late.wait_closed(timeout=60)
    assert late.goaway is None and not late.inbuf  # refused before any frame
    assert "every connection has calls" in d.logtext()
    for f in busy:
        ping(f)  # none of them was closed
    n = len(d.fds())
    busy.pop().close()
    wait_for(lambda: len(d.fds()) < n, what="the daemon to see the connection closed")
    assert runtime(cri, d).Version(cri.pb.VersionRequest(), timeout=5).runtime_name == "kinglet"
    for f in busy:
        f.close()


def test_idle_connection_is_closed(daemon_factory):
    d = daemon_factory(["--grpc-idle-timeout", "1"])
    t0 = time.monotonic()  # before the idle connection opens: a lower bound
    idle, busy = Frames(d.sock), Frames(d.sock)
    busy.request(RS + "Version", None, end=False)
    idle.wait_closed(timeout=30)
    assert time.monotonic() - t0 > 0.8
    assert idle.goaway == (0, 0)  # GOAWAY NO_ERROR: a gRPC client reconnects
    ping(busy)  # a connection with a call is not idle
    busy.close()


def test_keepalive_ping_closes_a_dead_peer(daemon_factory):
    d = daemon_factory(["--grpc-keepalive-time", "1", "--grpc-keepalive-timeout", "1",
                        "--grpc-idle-timeout", "0"])
    dead = Frames(d.sock, answer_pings=False, timeout=0.05)
    alive = Frames(d.sock, timeout=0.05)
    for f in (dead, alive):
        f.request(RS + "Version", None, end=False)

    def dead_closed():
        for f in (dead, alive):
            try:
                f.read_some()
            except TimeoutError:
                pass
        return dead.closed
    wait_for(dead_closed, interval=0, what="the connection that answers no ping to close")
    assert dead.closed and dead.pings >= 1
    assert alive.pings >= 1 and not alive.closed
    alive.sock.settimeout(5)
    ping(alive)
    alive.close()


# ---- the limits docs/architecture.md states -------------------------------

def test_request_bytes_per_connection_are_capped_at_64_mib(cri, daemon):
    raw = Raw(daemon.sock, timeout=30)
    msg = cri.pb.VersionRequest(version="x" * (15 * MiB)).SerializeToString()
    sids = []
    for _ in range(4):  # 60 MiB, not finished
        sid = raw.start(RS + "Version", None, end=False)
        assert raw.send_all(sid, frame(msg)[:-1])
        sids.append(sid)
    fifth = raw.start(RS + "Version", None, end=False)
    assert not raw.send_all(fifth, frame(msg))
    st = raw.response(fifth)
    assert Raw.status(st) == RESOURCE_EXHAUSTED
    assert "on this connection" in Raw.message(st)
    for sid in sids:  # the four finish and are served
        assert raw.send_all(sid, frame(msg)[-1:], end=True) or raw.streams[sid]["ended"]
        st = raw.response(sid, timeout=30)
        assert Raw.status(st) == OK, Raw.message(st)
    raw.close()


def test_headers_are_capped_at_64_kib(daemon):
    f = Frames(daemon.sock)
    ok, _ = f.request(RS + "Version", frame(b""), extra=[("x-pad", "a" * 60000)])
    big, _ = f.request(RS + "Version", frame(b""), extra=[("x-pad", "a" * 70000)])
    f.pump(lambda: f.streams[ok]["ended"] and f.streams[big]["ended"])
    assert Frames.status(f.streams[ok]) == OK
    assert f.streams[big]["reset"] is not None and Frames.status(f.streams[big]) is None
    ping(f)  # the connection survives
    f.close()


def test_streams_per_connection_are_capped_at_1024(daemon):
    # Before the client acknowledged the limit, a stream past it is refused.
    f = Frames(daemon.sock)
    sids = [f.request(RS + "Version", None, end=False)[0] for _ in range(1025)]
    f.pump(lambda: f.streams[sids[-1]]["ended"])
    assert f.streams[sids[-1]]["reset"] == REFUSED_STREAM
    assert not any(f.streams[s]["ended"] for s in sids[:-1])
    f.data(sids[0], frame(b""), end=True)  # one ends: room for another
    # Only once its answer has ended is the stream closed on both sides:
    # a request sent before that would be the 1025th open stream, which,
    # the limit acknowledged by now, ends the connection.
    f.pump(lambda: f.streams[sids[0]]["ended"])
    again, _ = f.request(RS + "Version", frame(b""))
    f.pump(lambda: f.streams[again]["ended"])
    assert Frames.status(f.streams[again]) == OK
    f.close()
    # After, it is a connection error (RFC 9113 5.1.2).
    f = Frames(daemon.sock)
    ping(f)
    sids = [f.request(RS + "Version", None, end=False)[0] for _ in range(1025)]
    f.wait_closed()
    assert f.goaway == (0, PROTOCOL_ERROR) or f.goaway == (sids[-2], PROTOCOL_ERROR)
    f.close()


def test_connections_are_capped_at_1024(cri, daemon_factory):
    raise_nofile(4096)
    d = daemon_factory()
    busy = []
    try:
        for _ in range(1024):
            f = Frames(d.sock)
            f.request(RS + "Version", None, end=False)
            busy.append(f)
        for f in busy:
            ping(f)
        late = Frames(d.sock)
        late.wait_closed(timeout=60)
        assert late.goaway is None and not late.inbuf
        n = len(d.fds())
        busy.pop().close()
        wait_for(lambda: len(d.fds()) < n, what="the daemon to see the connection closed")
        assert runtime(cri, d).Version(cri.pb.VersionRequest(), timeout=5).runtime_name == "kinglet"
    finally:
        for f in busy:
            f.close()


def unread_bytes(peer_inode):
    """Bytes waiting in the receive queue of the daemon's end of a unix
    connection, found by our end's inode (its peer)."""
    out = subprocess.run(["ss", "-x", "-n", "-H"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 8 and cols[7] == str(peer_inode):
            return int(cols[2])
    return None


def loop_sleeping(d):
    with open(f"/proc/{d.pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "S"


def test_reads_pause_past_256_kib_unread(cri, daemon):
    """A client that sends calls and reads nothing: the daemon stops reading
    its requests (they stay in the socket) instead of queueing answers."""
    # HTTP/2 flow control would stop the answers first: open the windows
    # wide, so that only the socket holds them back.
    f = Frames(daemon.sock, settings=[(INITIAL_WINDOW_SIZE, (1 << 31) - 1)])
    f.window_update(0, (1 << 31) - 1 - 65535)
    req = frame(cri.pb.VersionRequest(version="x" * 1000).SerializeToString())
    n = 20000
    blob = b"".join(f.request(RS + "Version", req, send=False)[1] for _ in range(n))
    ping(f)  # the server's SETTINGS are answered before the sender starts
    rss = Rss(daemon)
    sender = threading.Thread(target=f.send, args=(blob,))
    sender.start()
    ino = os.fstat(f.sock.fileno()).st_ino

    def paused():
        # Requests wait unread in the daemon's socket while its loop sleeps:
        # it is not reading them.
        q1 = unread_bytes(ino)
        sleeping = loop_sleeping(daemon)
        q2 = unread_bytes(ino)
        return q1 and q1 == q2 and sleeping and sender.is_alive()
    wait_for(paused, timeout=60, what="the daemon to stop reading")
    assert rpc_count(daemon, "Version") < n
    rss.below(8 * 1024)
    f.sock.settimeout(30)
    f.pump(lambda: all(st["ended"] for st in f.streams.values()), timeout=60)
    sender.join(10)
    assert all(Frames.status(st) == OK for st in f.streams.values())
    f.close()


# ---- HTTP/2 floods --------------------------------------------------------

def reset_burst(f, n):
    """n streams opened and reset at once (CVE-2023-44487), in one write;
    False if the server closed the connection while we were sending."""
    blob = b""
    for _ in range(n):
        sid, out = f.request(RS + "GetContainerEvents", frame(b""), send=False)
        blob += out + h2frame(RST_STREAM, 0, sid, struct.pack(">I", 8))
    try:
        f.send(blob)
        return True
    except OSError:
        return False


def test_rapid_reset_flood_ends_the_connection(cri, daemon):
    """CVE-2023-44487: streams opened and reset at once. The documented
    burst is 1000 resets (then 33 a second): 900 are served, 1200 end the
    connection, with a GOAWAY naming a stream within the burst."""
    burst, rate = 1000, 33
    under = Frames(daemon.sock)
    assert reset_burst(under, burst - 100)
    ping(under)  # every reset handled, and the connection still up
    assert under.goaway is None and not under.closed
    under.close()
    over = Frames(daemon.sock)
    t0 = time.monotonic()
    reset_burst(over, burst + 200)
    over.wait_closed(timeout=60)
    # what the rate adds while the burst is read (the tokens it refills)
    allowed = burst + rate * (time.monotonic() - t0)
    assert over.goaway is not None, "closed without a GOAWAY"
    assert over.goaway[1] == 2, over.goaway  # INTERNAL_ERROR, as nghttp2 says it
    assert over.goaway[0] <= 2 * allowed + 1, (over.goaway, allowed)
    assert runtime(cri, daemon).Version(cri.pb.VersionRequest(), timeout=10).runtime_name == "kinglet"


def test_continuation_flood_ends_the_connection(cri, daemon):
    """CVE-2024-28182 class: one header block in endless CONTINUATION frames."""
    rss = Rss(daemon)
    f = Frames(daemon.sock)
    sid = f.next_sid
    blob = h2frame(HEADERS, 0, sid, f.headers_block(RS + "Version"))
    blob += h2frame(CONTINUATION, 0, sid, b"\x10\x03x-a\x01b") * 20000
    try:
        f.send(blob)
    except OSError:
        pass
    f.wait_closed(timeout=60)
    assert f.goaway is not None and f.goaway[1] != 0
    rss.below(4 * 1024)
    assert runtime(cri, daemon).Version(cri.pb.VersionRequest(), timeout=5).runtime_name == "kinglet"
