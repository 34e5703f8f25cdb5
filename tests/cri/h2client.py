"""A raw HTTP/2 client (python3-h2) for the cases grpcio will not produce:
garbage, compressed flags, odd headers, half-sent requests."""
import socket
import struct
import time

import h2.config
import h2.connection
import h2.events


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

    def pump(self, until, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not until():
            if time.monotonic() > deadline:
                raise TimeoutError("no answer in time")
            data = self.sock.recv(65536)
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

    def response(self, sid, timeout=10.0):
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
