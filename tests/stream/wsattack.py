#!/usr/bin/python3
"""A hostile WebSocket client of kinglet's streaming server, on a raw
socket: it makes the opening handshake right, then sends one kind of bad
(or control) frame and reports how the server ended the connection.

    wsattack.py URL CASE [--proto P]
        prints "close CODE" (the server's close frame; CODE "-" if it had
        none), "dropped" (the connection ended without one), or for the
        endless case "accepted N" if the server took N bytes without
        ending it. For CASE ping: "pong PAYLOAD" first.

CASEs: unmasked, huge (a 2^63-byte frame header), endless (a fragmented
message that never ends), control126, badutf8 (base64 text that is not
UTF-8), rsv, opcode, ping (a ping, then a close 1000 handshake),
slowread (reads 1 MiB of output, prints "stalled", waits for a line on
stdin, then reads the rest: prints "read N" and the outcome).
"""
import argparse
import base64
import os
import socket
import struct
import sys
from urllib.parse import urlparse

KEY = bytes([0x37, 0xfa, 0x21, 0x3d])


def frame(op, data, fin=True, mask=True, b0=None, length=None):
    n = len(data) if length is None else length
    m = 0x80 if mask else 0
    head = bytes([b0 if b0 is not None else (0x80 if fin else 0) | op])
    if n < 126:
        head += bytes([m | n])
    elif n <= 0xffff:
        head += bytes([m | 126]) + struct.pack(">H", n)
    else:
        head += bytes([m | 127]) + struct.pack(">Q", n)
    if not mask:
        return head + data
    return head + KEY + bytes(c ^ KEY[i % 4] for i, c in enumerate(data))


class Conn:
    def __init__(self, url, proto):
        u = urlparse(url)
        self.s = socket.create_connection((u.hostname, u.port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\nUpgrade: websocket\r\n"
                        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                        f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {proto}\r\n\r\n"
                        ).encode())
        self.buf = bytearray()
        while b"\r\n\r\n" not in self.buf:
            c = self.s.recv(4096)
            if not c:
                sys.exit("no handshake reply")
            self.buf += c
        head, rest = bytes(self.buf).split(b"\r\n\r\n", 1)
        self.buf = bytearray(rest)
        if not head.startswith(b"HTTP/1.1 101"):
            sys.exit("handshake: " + head.decode(errors="replace"))

    def _need(self, n):
        while len(self.buf) < n:
            c = self.s.recv(65536)
            if not c:
                raise EOFError
            self.buf += c

    def read_frame(self):
        """(opcode, payload) of the server's next frame; EOFError at the end."""
        self._need(2)
        b0, b1 = self.buf[0], self.buf[1]
        assert not b1 & 0x80, "a server frame was masked"
        n, off = b1 & 0x7f, 2
        if n == 126:
            self._need(4)
            n, off = struct.unpack(">H", self.buf[2:4])[0], 4
        elif n == 127:
            self._need(10)
            n, off = struct.unpack(">Q", self.buf[2:10])[0], 10
        self._need(off + n)
        payload = bytes(self.buf[off:off + n])
        del self.buf[:off + n]
        return b0 & 0x0f, payload

    def outcome(self):
        """How the server ends the connection: its close frame or a drop."""
        try:
            while True:
                op, p = self.read_frame()
                if op == 8:
                    code = str(struct.unpack(">H", p[:2])[0]) if len(p) >= 2 else "-"
                    # after its close, the server closes the TCP connection
                    try:
                        while self.s.recv(65536):
                            pass
                    except OSError:
                        pass
                    return f"close {code}"
        except (EOFError, ConnectionResetError):
            return "dropped"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("case")
    ap.add_argument("--proto", default="v4.channel.k8s.io")
    a = ap.parse_args()
    c = Conn(a.url.replace("https://", "http://"), a.proto)
    case = a.case
    if case == "unmasked":
        c.s.sendall(frame(2, b"\x00hi\n", mask=False))
    elif case == "huge":
        c.s.sendall(bytes([0x82, 0xff]) + struct.pack(">Q", 1 << 63) + KEY)
    elif case == "control126":
        c.s.sendall(frame(9, bytes(126)))
    elif case == "badutf8":
        c.s.sendall(frame(1, b"0\xc0\x80\xff"))
    elif case == "rsv":
        c.s.sendall(frame(2, b"\x00x", b0=0xc2))
    elif case == "opcode":
        c.s.sendall(frame(3, b"\x00x"))
    elif case == "ping":
        c.s.sendall(frame(9, b"are you there"))
        op, p = c.read_frame()
        print("pong" if op == 10 else f"op{op}", p.decode(errors="replace"))
        c.s.sendall(frame(8, struct.pack(">H", 1000) + b"bye"))
    elif case == "slowread":
        total, stalled, ch = 0, False, None
        while True:
            op, p = c.read_frame()
            if op == 8:
                break
            if op == 2:  # a message: its channel, then data (continued by op 0)
                ch, p = p[0], p[1:]
            if op in (0, 2) and ch == 1:
                total += len(p)
            if total >= 1 << 20 and not stalled:
                stalled = True
                print("stalled", flush=True)
                sys.stdin.readline()
        print(f"read {total}")
        print(f"close {struct.unpack('>H', p[:2])[0] if len(p) >= 2 else '-'}")
        return
    elif case == "endless":
        chunk = frame(2, b"\x00" + bytes(65535), fin=False)
        more = frame(0, bytes(65536), fin=False)
        sent = 0
        try:
            c.s.sendall(chunk)
            sent += 65536
            while sent < (64 << 20):
                c.s.sendall(more)
                sent += 65536
        except OSError:
            pass
        if sent >= (64 << 20):
            print(f"accepted {sent}")
            return
    else:
        sys.exit("unknown case " + case)
    print(c.outcome())


if __name__ == "__main__":
    main()
