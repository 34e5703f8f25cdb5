"""Pull progress through a running daemon (/kinglet.v1.Images/PullProgress,
src/cri/image_private.c): `kinglet image pull` on a terminal shows each
layer's steps as it does on the store, says when it waits for another
caller's pull of the same image, and a client that does not read costs
the daemon a few steps, not every one."""
import os
import select
import struct
import subprocess
import threading

import h2.config
import h2.connection
import h2.events
import h2.settings
import socket

from cri_conftest import channel, wait_for
from imagelib import FakeRegistry, Image, Tar, sha256
from .test_cri import _human


class Pty:
    """A command with its stdout on a terminal the test made, read by a
    thread: .out grows as it prints."""

    def __init__(self, cmd):
        import pty
        self.master, slave = pty.openpty()
        self.p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave,
                                  stderr=subprocess.PIPE)
        os.close(slave)
        self.out = ""
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        while True:
            ready, _, _ = select.select([self.master], [], [], 300)
            if not ready:
                return
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: the last holder of the slave has gone
                return
            if not chunk:
                return
            self.out += chunk.decode(errors="replace")

    def wait(self, timeout=300):
        rc = self.p.wait(timeout=timeout)
        self.t.join(timeout)
        os.close(self.master)
        return rc, self.out, self.p.stderr.read().decode()


def lines(out):
    """The terminal's lines as last drawn (carriage returns and line
    erasures resolved)."""
    return [ln.split("\r")[-1].replace("\x1b[K", "") for ln in out.splitlines()]


def test_progress_through_the_daemon_on_a_terminal_only(cri, daemon_factory, images,
                                                        kinglet_bin):
    f = FakeRegistry()
    f.add_image("layers", images["layers"])
    f.start()
    try:
        d = daemon_factory(["--insecure-registry", f.host])
        ref = f"{f.host}/x/y:layers"
        img = images["layers"]
        rc, out, err = Pty([kinglet_bin, "image", "--socket", d.sock, "pull", ref]).wait()
        assert rc == 0, err
        ls = lines(out)
        for blob, _, _ in img.layers:
            rows = [ln for ln in ls if ln.startswith(sha256(blob)[7:19])]
            assert rows, out
            assert "done" in rows[-1].split(), rows
            human = _human(len(blob))
            assert f"{human} / {human}" in " ".join(rows[-1].split()), rows
        assert ls[-1].strip() == img.id, out
        # not a terminal: the image id alone, through CRI's PullImage
        p = subprocess.run([kinglet_bin, "image", "--socket", d.sock, "pull", ref],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0 and p.stdout == img.id + "\n" and p.stderr == "", p
        assert d.stop() == 0
    finally:
        f.stop()


def big_image(n_layers=2, mib=8):
    return Image([(Tar().bigfile(f"big{i}/random.bin", mib << 20).bytes(), "gzip")
                  for i in range(n_layers)])


def test_joining_a_pull_says_it_waits(cri, daemon_factory, kinglet_bin):
    """A pull of an image another caller is pulling joins it: the terminal
    says so, then shows the shared pull's layers to their end."""
    img = Image([(Tar().bigfile("big/random.bin", 3 << 20).bytes(), "gzip")])
    f = FakeRegistry()
    f.gate = threading.Event()  # blobs stall after their first MiB
    f.add_image("slow", img)
    f.start()
    try:
        d = daemon_factory(["--insecure-registry", f.host])
        ref = f"{f.host}/x/slow:slow"
        ims = cri.grpc.ImageServiceStub(channel(d))
        first = ims.PullImage.future(cri.pb.PullImageRequest(image=cri.pb.ImageSpec(image=ref)),
                                     timeout=300)
        wait_for(lambda: any("/blobs/" in r[1] for r in f.requests), timeout=60,
                 what="the first pull's download")
        t = Pty([kinglet_bin, "image", "--socket", d.sock, "pull", ref])
        wait_for(lambda: "another pull of" in t.out, timeout=60, what="the waiting line")
        f.gate.set()
        rc, out, err = t.wait()
        assert rc == 0, err
        ls = lines(out)
        assert any(ln.split()[:2] == ["image", "waiting"] and ref in ln for ln in ls), out
        row = [ln for ln in ls if ln.startswith(sha256(img.layers[0][0])[7:19])]
        assert row and "done" in row[-1].split(), out
        assert ls[-1].strip() == img.id, out
        assert first.result().image_ref == img.id
        assert len([r for r in f.requests if "/blobs/" in r[1]]) == 2, "one pull: config, layer"
        assert d.stop() == 0
    finally:
        f.gate.set()
        f.stop()


def pull_progress_request(ref):
    # runtime.v1.PullImageRequest{image: ImageSpec{image: ref}}
    spec = b"\x0a" + _varint(len(ref)) + ref.encode()
    return b"\x0a" + _varint(len(spec)) + spec


def _varint(n):
    out = b""
    while True:
        b = n & 0x7f
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def decode_progress(msg):
    """kinglet.v1.PullProgress as a dict (proto/kinglet.proto)."""
    names = {1: "digest", 2: "phase", 3: "bytes", 4: "total", 5: "image_id"}
    out, i = {}, 0
    while i < len(msg):
        key, i = _read_varint(msg, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _read_varint(msg, i)
        else:
            assert wire == 2, msg
            n, i = _read_varint(msg, i)
            v, i = msg[i:i + n].decode(), i + n
        out[names[field]] = v
    return out


def _read_varint(b, i):
    n = shift = 0
    while True:
        n |= (b[i] & 0x7f) << shift
        i += 1
        if not b[i - 1] & 0x80:
            return n, i
        shift += 7


class Unread:
    """A PullProgress call on its own connection whose client grants the
    daemon no flow-control window: nothing it is sent leaves the daemon
    until read_all() opens the window and reads to the end."""

    def __init__(self, sock_path, ref):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(sock_path)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        self.conn.initiate_connection()
        self.sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(self.sid, [(":method", "POST"), (":scheme", "http"),
                                          (":path", "/kinglet.v1.Images/PullProgress"),
                                          (":authority", "localhost"), ("te", "trailers"),
                                          ("content-type", "application/grpc")])
        body = pull_progress_request(ref)
        self.conn.send_data(self.sid, struct.pack(">BI", 0, len(body)) + body, end_stream=True)
        self.sock.sendall(self.conn.data_to_send())
        self.data, self.trailers, self.ended = b"", {}, False

    def read_all(self):
        self.conn.increment_flow_control_window(1 << 24, stream_id=self.sid)
        self.sock.sendall(self.conn.data_to_send())

        def more():
            try:
                data = self.sock.recv(1 << 20)
            except socket.timeout:
                return False
            assert data, "the daemon closed the connection"
            for ev in self.conn.receive_data(data):
                if isinstance(ev, h2.events.DataReceived):
                    self.data += ev.data
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, self.sid)
                elif isinstance(ev, h2.events.TrailersReceived):
                    self.trailers = {k.decode(): v.decode() for k, v in ev.headers}
                elif isinstance(ev, h2.events.StreamEnded):
                    self.ended = True
            self.sock.sendall(self.conn.data_to_send())
            return self.ended
        wait_for(more, timeout=60, interval=0, what="the stream's end")
        msgs, i = [], 0
        while i < len(self.data):
            n = struct.unpack(">I", self.data[i + 1:i + 5])[0]
            msgs.append(decode_progress(self.data[i + 5:i + 5 + n]))
            i += 5 + n
        return msgs

    def close(self):
        self.sock.close()


def test_clients_that_do_not_read_cost_a_few_steps(cri, daemon_factory):
    """Clients that take nothing while a pull goes on: the daemon keeps the
    latest step of each layer for them and a few messages queued, never
    every step. When they read at last, each gets its layers' last steps
    ("done") and the image id, and the steps in between that found no room
    are gone: far fewer messages than the pull made steps."""
    img = big_image()
    f = FakeRegistry(throttle=0.15)  # a MiB at a time: a step for each
    f.add_image("big", img)
    f.start()
    clients = []
    try:
        d = daemon_factory(["--insecure-registry", f.host])
        ref = f"{f.host}/x/big:big"
        idle = d.rss_kb()
        clients = [Unread(d.sock, ref) for _ in range(8)]
        ims = cri.grpc.ImageServiceStub(channel(d))
        wait_for(lambda: ims.ImageStatus(cri.pb.ImageStatusRequest(
            image=cri.pb.ImageSpec(image=ref)), timeout=10).image.id == img.id,
            timeout=300, interval=0.2, what="the pull's end")
        assert d.rss_kb() < idle + 8192, (idle, d.rss_kb())
        layers = {sha256(blob) for blob, _, _ in img.layers}
        mib = sum(len(blob) for blob, _, _ in img.layers) >> 20
        for c in clients:
            msgs = c.read_all()
            assert c.trailers.get("grpc-status") == "0", c.trailers
            assert msgs[-1].get("image_id") == img.id, msgs[-1]
            last = {}
            for m in msgs[:-1]:
                last[m.get("digest", "")] = m
            assert {k for k in last if k} == layers, last
            assert all(last[k]["phase"] == "done" for k in layers), last
            # the pull made a step per MiB of each layer (and verifying,
            # done): without the bound every one of them would be here.
            # Here: what 512 bytes of queue took (about five), then each
            # layer's last step and the id.
            assert len(msgs) <= 6 + len(layers) + 1 < mib, (len(msgs), mib, msgs)
        assert d.stop() == 0
    finally:
        for c in clients:
            c.close()
        f.stop()
