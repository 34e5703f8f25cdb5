#!/usr/bin/python3
"""A client of kinglet's streaming server that floods it and never reads
its socket (a 4 KiB receive buffer, set before connecting): every answer
the server queues stays queued.

    flood.py URL CASE [--max BYTES] [--stdin]
        CASE spdy-ping: an exec session over SPDY/3.1 (its error and stdout
            streams created with our own SYN_STREAMs), then PING frames.
        CASE ws-ping: a WebSocket exec session, then empty pings.
        CASE ws-mixed: a WebSocket exec session with stdin, then data on
            channel 0 (64 KiB messages) with a ping after each.
        CASE ws-upload / spdy-upload / pf-upload: data only (64 KiB
            messages: stdin of an exec, or port 8080 of a WebSocket
            port-forward, or with --ports N one message to each of the
            ports 8080 to 8080+N-1 in turn), no ping; with --size N,
            messages (SPDY data frames) of N bytes each, a WebSocket
            message's first byte its channel.
        CASE ws-idle: a WebSocket exec session; sends nothing.
        CASE ws-trickle: a WebSocket exec session that reads 4 KiB every
            half second for --seconds, then prints "alive READ" if the
            server has not ended the connection (else "closed READ").
    Prints "port P" (our local port) once connected; "stalled SENT" once
    the kernel has taken no byte of ours for a second (or "capped SENT"
    at --max); then "closed SENT" when the server ended the connection
    (seen from TCP_INFO: the socket is no longer ESTABLISHED). A line on
    our stdin makes it print "sent SENT" (what the kernel took so far);
    with --wait, the first line starts the sending instead.
"""
import argparse
import base64
import os
import re
import select
import socket
import struct
import sys
import time
import zlib
from urllib.parse import urlparse

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = bytes([0x37, 0xfa, 0x21, 0x3d])


def ws_frame(op, data):
    n = len(data)
    head = bytes([0x80 | op])
    if n < 126:
        head += bytes([0x80 | n])
    elif n <= 0xffff:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    return head + KEY + bytes(c ^ KEY[i % 4] for i, c in enumerate(data))


def spdy_dictionary():
    src = open(os.path.join(HERE, "..", "..", "src", "stream", "spdy_dict.c")).read()
    body = src[src.index("{") + 1:src.index("}")]
    return bytes(int(x, 16) for x in re.findall(r"0x([0-9a-fA-F]{2})", body))


class Spdy:
    def __init__(self):
        self.z = zlib.compressobj(zdict=spdy_dictionary())

    def syn_stream(self, sid, headers):
        block = struct.pack(">I", len(headers))
        for k, v in headers.items():
            block += struct.pack(">I", len(k)) + k.encode() + struct.pack(">I", len(v)) + v.encode()
        z = self.z.compress(block) + self.z.flush(zlib.Z_SYNC_FLUSH)
        body = struct.pack(">IIH", sid, 0, 0) + z
        return struct.pack(">HHI", 0x8003, 1, len(body)) + body

    @staticmethod
    def ping(pid):
        return struct.pack(">HHII", 0x8003, 6, 4, pid)

    @staticmethod
    def data(sid, data):
        return struct.pack(">II", sid, len(data)) + data


def connect(url):
    u = urlparse(url)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(30)
    s.connect((u.hostname, u.port))
    return s, u


def read_head(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        c = s.recv(1)  # never more than the head
        if not c:
            sys.exit("no answer to the upgrade")
        buf += c
    if not buf.startswith(b"HTTP/1.1 101"):
        sys.exit("upgrade: " + buf.decode(errors="replace"))


def state(s):
    return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("case")
    ap.add_argument("--max", type=int, default=16 << 20)
    ap.add_argument("--stdin", action="store_true", help="the exec has a stdin stream")
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--ports", type=int, default=1,
                    help="pf-upload: ports 8080 and up, the data spread over them")
    ap.add_argument("--wait", action="store_true",
                    help="once the session is set up, wait for a line on stdin to send")
    ap.add_argument("--size", type=int, default=65536,
                    help="uploads: the data bytes of one message or SPDY data frame")
    a = ap.parse_args()
    s, u = connect(a.url)
    print("port", s.getsockname()[1], flush=True)
    if a.case.startswith("spdy"):
        s.sendall((f"POST {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\nConnection: Upgrade\r\n"
                   "Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n"
                   ).encode())
        read_head(s)
        sp = Spdy()
        types = ["error", "stdin", "stdout"] if a.stdin else ["error", "stdout"]
        for i, t in enumerate(types):
            s.sendall(sp.syn_stream(2 * i + 1, {"streamtype": t}))
        if a.case == "spdy-ping":
            unit = b"".join(Spdy.ping(2 * i + 1) for i in range(5000))
        else:
            unit = Spdy.data(3, bytes(a.size))
    else:
        proto = "portforward.k8s.io" if a.case == "pf-upload" else "v4.channel.k8s.io"
        ports = ",".join(str(8080 + i) for i in range(a.ports))
        path = u.path + (f"?ports={ports}" if a.case == "pf-upload" else "")
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall((f"GET {path} HTTP/1.1\r\nHost: {u.netloc}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                   f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {proto}\r\n\r\n"
                   ).encode())
        read_head(s)
        ping = ws_frame(9, b"")
        if a.case == "ws-trickle":
            got, end = 0, time.monotonic() + a.seconds
            while time.monotonic() < end:
                time.sleep(0.5)  # the slow reader this case is
                try:
                    c = s.recv(4096)
                except OSError:
                    c = b""
                if not c:
                    print("closed", got, flush=True)
                    return
                got += len(c)
            print("alive" if state(s) == 1 else "closed", got, flush=True)
            return
        if a.case == "ws-idle":
            unit, a.max = b"", 0
        elif a.case == "ws-ping":
            unit = ping * 10000
        else:
            data = b"".join(ws_frame(2, bytes([2 * i]) + bytes(a.size - 1)) for i in range(a.ports))
            unit = data + ping if a.case == "ws-mixed" else data
    if a.wait:
        sys.stdin.readline()
    if unit and len(unit) < 65536:  # small messages: 64 KiB of them a send
        unit *= 65536 // len(unit)
    s.setblocking(False)
    sent, pending, last, said = 0, memoryview(b""), time.monotonic(), False
    while True:
        r, w, _ = select.select([sys.stdin], [s] if sent < a.max else [], [], 0.1)
        if sys.stdin in r:
            if not sys.stdin.readline():
                return
            print("sent", sent, flush=True)
        if state(s) != 1:  # TCP_ESTABLISHED
            print("closed", sent, flush=True)
            return
        if w:
            if not pending:
                pending = memoryview(unit)[:a.max - sent]
            try:
                n = s.send(pending)
            except BlockingIOError:
                n = 0
            except OSError:
                print("closed", sent, flush=True)
                return
            if n:
                sent += n
                pending = pending[n:]
                last = time.monotonic()
        if not said and a.max and (sent >= a.max or time.monotonic() - last > 1):
            said = True
            print("capped" if sent >= a.max else "stalled", sent, flush=True)


if __name__ == "__main__":
    main()
