"""A raw HTTP/2 client (python3-h2) for the cases grpcio will not produce:
garbage, compressed flags, odd headers, half-sent requests."""
import socket
import struct

import h2.config
import h2.connection
import h2.events

from waiting import wait_for


def frame(msg, compressed=False):
    return struct.pack(">BI", 1 if compressed else 0, len(msg)) + msg


class Raw:
    def __init__(self, sock_path, timeout=10.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(sock_path)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.flush()
        self.streams = {}

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def start(self, path, body=None, headers=(), end=True, content_type="application/grpc"):
        sid = self.conn.get_next_available_stream_id()
        hdrs = [(":method", "POST"), (":scheme", "http"), (":path", path),
                (":authority", "localhost"), ("te", "trailers")]
        if content_type:
            hdrs.append(("content-type", content_type))
        hdrs += list(headers)
        self.conn.send_headers(sid, hdrs, end_stream=body is None and end)
        if body is not None:
            self.conn.send_data(sid, body, end_stream=end)
        self.flush()
        self.streams[sid] = {"headers": {}, "trailers": {}, "data": b"", "ended": False,
                             "reset": None}
        return sid

    def pump(self, until, timeout=60.0):
        """Reads until until() holds; a read that times out (the socket's
        timeout) is tried again until `timeout`."""
        def done():
            if until():
                return True
            try:
                self.read_once()
            except socket.timeout:
                pass
            return until()
        wait_for(done, timeout, interval=0, what="the server's answer")

    def send_all(self, sid, data, end=False):
        """Sends a request body as flow control allows, reading the
        server's WINDOW_UPDATEs as needed. False if the server reset the
        stream (or ended it) first."""
        import h2.exceptions
        view = memoryview(data)
        try:
            while view:
                n = min(self.conn.local_flow_control_window(sid),
                        self.conn.max_outbound_frame_size, len(view))
                if n <= 0:
                    self.read_once()
                    if self.streams[sid]["ended"]:
                        return False
                    continue
                self.conn.send_data(sid, bytes(view[:n]))
                view = view[n:]
                self.flush()
            if end:
                self.conn.end_stream(sid)
                self.flush()
        except h2.exceptions.StreamClosedError:
            return False
        return not self.streams[sid]["ended"]

    def read_once(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("server closed the connection")
        for ev in self.conn.receive_data(data):
            st = self.streams.get(getattr(ev, "stream_id", None))
            if isinstance(ev, h2.events.ResponseReceived):
                st["headers"] = {k.decode(): v.decode() for k, v in ev.headers}
            elif isinstance(ev, h2.events.TrailersReceived):
                st["trailers"] = {k.decode(): v.decode() for k, v in ev.headers}
            elif isinstance(ev, h2.events.DataReceived):
                st["data"] += ev.data
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                st["ended"] = True
            elif isinstance(ev, h2.events.StreamReset):
                if st is not None:
                    st["reset"] = ev.error_code
                    st["ended"] = True
        self.flush()

    def response(self, sid, timeout=60.0):
        st = self.streams[sid]
        self.pump(lambda: st["ended"], timeout)
        return st

    @staticmethod
    def status(st):
        """grpc-status from trailers, or from a trailers-only response."""
        v = st["trailers"].get("grpc-status", st["headers"].get("grpc-status"))
        return None if v is None else int(v)

    @staticmethod
    def message(st):
        import urllib.parse
        v = st["trailers"].get("grpc-message", st["headers"].get("grpc-message", ""))
        return urllib.parse.unquote(v)

    def close(self):
        self.sock.close()


# ---- frame-level client: for what h2's state machine would refuse to send
# (more streams than the server allows, floods, a window of 0) ----

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 3, 4, 6, 7, 8, 9)
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
INITIAL_WINDOW_SIZE = 4


def h2frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


class Frames:
    """Writes HTTP/2 frames as told and records what the server sends back,
    per stream: headers, trailers, DATA bytes, RST_STREAM codes; GOAWAY and
    PINGs for the connection. PINGs are answered only with answer_pings."""

    def __init__(self, sock_path, settings=(), timeout=10.0, answer_pings=True, connect=True):
        import hpack
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.dec.max_header_list_size = 1 << 24
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.answer_pings = answer_pings
        self.next_sid = 1
        self.streams = {}
        self.goaway = None
        self.pings = 0
        self.pings_acked = 0
        self.closed = False
        self.inbuf = b""
        self.hblock = None
        if connect:
            # A blocking connect: a timeout makes the socket non-blocking,
            # and a full listen backlog (a slow daemon) would be EAGAIN.
            self.sock.connect(sock_path)
        self.sock.settimeout(timeout)
        if connect:
            self.reply(PREFACE + h2frame(SETTINGS, 0, 0, b"".join(
                struct.pack(">HI", k, v) for k, v in settings)))

    def send(self, data):
        self.sock.sendall(data)

    def reply(self, data):
        """An automatic answer (SETTINGS or PING ACK): the server may have
        closed already."""
        try:
            self.sock.sendall(data)
        except OSError:
            pass

    def headers_block(self, path, extra=()):
        hdrs = [(":method", "POST"), (":scheme", "http"), (":path", path),
                (":authority", "localhost"), ("te", "trailers"),
                ("content-type", "application/grpc"), *extra]
        return self.enc.encode(hdrs)

    def request(self, path, body=None, end=True, extra=(), send=True):
        """HEADERS (+ DATA frames of 16 KiB with body); returns (stream id,
        bytes). Flow control is the caller's business."""
        sid = self.next_sid
        self.next_sid += 2
        self.streams[sid] = {"headers": {}, "trailers": {}, "data": 0, "reset": None,
                             "ended": False}
        block = self.headers_block(path, extra)
        parts = [block[i:i + 16384] for i in range(0, len(block), 16384)]
        flags = END_STREAM if end and body is None else 0
        out = h2frame(HEADERS, flags | (END_HEADERS if len(parts) == 1 else 0), sid, parts[0])
        for i, part in enumerate(parts[1:], 2):
            out += h2frame(CONTINUATION, END_HEADERS if i == len(parts) else 0, sid, part)
        if body is not None:
            out += self.data(sid, body, end, send=False)
        if send:
            self.send(out)
        return sid, out

    def data(self, sid, body, end=False, send=True):
        chunks = [body[i:i + 16384] for i in range(0, len(body), 16384)] or [b""]
        out = b"".join(h2frame(DATA, END_STREAM if end and i == len(chunks) - 1 else 0, sid, c)
                       for i, c in enumerate(chunks))
        if send:
            self.send(out)
        return out

    def window_update(self, sid, n):
        self.send(h2frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", n)))

    def _frame(self, ftype, flags, sid, payload):
        st = self.streams.get(sid)
        if ftype in (HEADERS, CONTINUATION):
            if ftype == HEADERS:
                if flags & 0x8:  # PADDED
                    payload = payload[1:len(payload) - payload[0]]
                if flags & 0x20:  # PRIORITY
                    payload = payload[5:]
                self.hblock = (sid, flags, payload)
            else:
                self.hblock = (self.hblock[0], self.hblock[1], self.hblock[2] + payload)
            if not flags & END_HEADERS:
                return
            sid, hflags, block = self.hblock
            self.hblock = None
            st = self.streams.get(sid)
            hdrs = {k if isinstance(k, str) else k.decode(): v if isinstance(v, str) else v.decode()
                    for k, v in self.dec.decode(block)}
            if st is not None:
                st["trailers" if st["headers"] else "headers"] = hdrs
                if hflags & END_STREAM:
                    st["ended"] = True
        elif ftype == DATA and st is not None:
            st["data"] += len(payload)
            if flags & END_STREAM:
                st["ended"] = True
        elif ftype == RST_STREAM and st is not None:
            st["reset"] = struct.unpack(">I", payload)[0]
            st["ended"] = True
        elif ftype == SETTINGS and not flags & ACK:
            self.reply(h2frame(SETTINGS, ACK, 0))
        elif ftype == PING and flags & ACK:
            self.pings_acked += 1
        elif ftype == PING:
            self.pings += 1
            if self.answer_pings:
                self.reply(h2frame(PING, ACK, 0, payload))
        elif ftype == GOAWAY:
            self.goaway = struct.unpack(">II", payload[:8])

    def read_some(self):
        """Reads what is there (blocking up to the socket's timeout) and
        handles whole frames; False once the server closed."""
        try:
            data = self.sock.recv(1 << 20)
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return False
        buf = self.inbuf + data
        off = 0
        while len(buf) - off >= 9:
            n = int.from_bytes(buf[off:off + 3], "big")
            if len(buf) - off < 9 + n:
                break
            ftype, flags = buf[off + 3], buf[off + 4]
            sid = struct.unpack(">I", buf[off + 5:off + 9])[0] & 0x7fffffff
            payload = buf[off + 9:off + 9 + n]
            off += 9 + n
            self._frame(ftype, flags, sid, payload)
        self.inbuf = buf[off:]
        return True

    def pump(self, until, timeout=60.0):
        """Reads until until() holds; a read that times out (the socket's
        timeout) is tried again until `timeout`."""
        def done():
            if until():
                return True
            try:
                if not self.read_some():
                    if until():
                        return True
                    raise ConnectionError("server closed the connection")
            except socket.timeout:
                pass
            return until()
        wait_for(done, timeout, interval=0, what="the server's answer")

    def wait_closed(self, timeout=60.0):
        def closed():
            try:
                self.read_some()
            except socket.timeout:
                pass
            return self.closed
        if not self.closed:
            wait_for(closed, timeout, interval=0, what="the server to close the connection")

    @staticmethod
    def status(st):
        v = st["trailers"].get("grpc-status", st["headers"].get("grpc-status"))
        return None if v is None else int(v)

    def close(self):
        self.sock.close()
