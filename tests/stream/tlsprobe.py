"""What a hostile or outdated client does to a TLS port, and what it gets
back: prints one JSON object, a result per probe.

  tlsprobe.py HOST PORT CA

Each probe opens its own connection and reads until the server closes it
(or a deadline passes). A result names the first record the server sent
("alert" with its level and description, "handshake" with the handshake
type, "other", or "nothing"), whether the server closed the connection,
and how long that took. Raw ClientHellos are built here byte by byte, so
that what is offered does not depend on this machine's OpenSSL policy."""
import json
import os
import socket
import ssl
import struct
import sys
import threading
import time


def ext(kind, data):
    return struct.pack(">HH", kind, len(data)) + data


MODERN_EXTS = (ext(10, struct.pack(">HHH", 4, 29, 23))  # groups: x25519, secp256r1
               + ext(11, b"\x01\x00")  # point formats: uncompressed
               + ext(13, struct.pack(">HHHH", 6, 0x0401, 0x0501, 0x0601)))  # rsa+sha256/384/512
MODERN = (0xc02f, 0xc030, 0xcca8)  # ECDHE-RSA with AES-GCM, ChaCha20-Poly1305


def client_hello(version=0x0303, suites=MODERN, exts=MODERN_EXTS, record_version=0x0301):
    body = (struct.pack(">H", version) + os.urandom(32) + b"\x00"
            + struct.pack(">H", 2 * len(suites)) + b"".join(struct.pack(">H", s) for s in suites)
            + b"\x01\x00")  # compression: none
    if exts:
        body += struct.pack(">H", len(exts)) + exts
    hs = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"\x16" + struct.pack(">HH", record_version, len(hs)) + hs


def probe(host, port, send, deadline=5.0, trickle=None):
    """Sends send (all at once, or a byte every trickle seconds until the
    server closes), then reads until EOF or deadline."""
    t0 = time.monotonic()
    s = socket.create_connection((host, port), timeout=deadline)
    got, closed = b"", False
    try:
        if trickle is None:
            s.sendall(send)
        else:
            s.settimeout(trickle)
            for b in send:
                try:
                    s.sendall(bytes([b]))
                except OSError:  # reset: the server is gone
                    closed = True
                    break
                try:
                    d = s.recv(4096)
                    if not d:
                        closed = True
                        break
                    got += d
                except socket.timeout:
                    pass
                if time.monotonic() - t0 > deadline:
                    break
        s.settimeout(max(0.1, deadline - (time.monotonic() - t0)))
        while not closed:
            try:
                d = s.recv(4096)
            except socket.timeout:
                break
            except ConnectionResetError:
                closed = True
                break
            if not d:
                closed = True
                break
            got += d
    finally:
        s.close()
    r = {"closed": closed, "seconds": round(time.monotonic() - t0, 2), "bytes": len(got)}
    if not got:
        r["first"] = "nothing"
    elif got[0] == 0x15 and len(got) >= 7:
        r.update(first="alert", level=got[5], description=got[6])
    elif got[0] == 0x16 and len(got) >= 6:
        r.update(first="handshake", type=got[5])
    else:
        r.update(first="other", head=got[:16].decode("latin-1"))
    return r


def good_client(host, port, ca):
    ctx = ssl.create_default_context(cafile=ca)
    with socket.create_connection((host, port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            return {"version": s.version(), "cipher": s.cipher()[0]}


def main():
    host, port, ca = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    hello = client_hello()
    probes = {
        # a client that forgot the s in https
        "plain-http": lambda: probe(host, port, b"GET /exec/x HTTP/1.1\r\nHost: h\r\n\r\n"),
        # a record header of random bytes, then a handshake record of them
        "garbage": lambda: probe(host, port, b"\x16\x03\x01\x00\xc8" + os.urandom(200)),
        # a record longer than TLS allows: refused from its header
        "oversized-record": lambda: probe(host, port, b"\x16\x03\x03\xff\xff" + b"\0" * 64),
        # a ClientHello whose cipher suite list runs past its end
        "bad-lengths": lambda: probe(host, port, hello[:44] + b"\xff\xfe" + hello[46:]),
        "tls1.0-only": lambda: probe(host, port, client_hello(version=0x0301)),
        "tls1.1-only": lambda: probe(host, port, client_hello(version=0x0302)),
        "ssl3-only": lambda: probe(host, port, client_hello(version=0x0300, record_version=0x0300)),
        # RSA key exchange with CBC, 3DES, RC4, NULL: no forward secrecy or broken
        "weak-ciphers": lambda: probe(host, port, client_hello(
            suites=(0x002f, 0x0035, 0x003c, 0x000a, 0x0005, 0x0004, 0x0001, 0x0002, 0xc013,
                    0xc014))),
        # the control: a TLS 1.2 hello with modern suites gets a ServerHello
        "modern": lambda: probe(host, port, hello, deadline=5.0),
        # half a ClientHello and silence; a byte a second: both cut by the
        # server's deadline for the request head
        "truncated": lambda: probe(host, port, hello[:len(hello) // 2], deadline=30.0),
        "slow": lambda: probe(host, port, hello, deadline=30.0, trickle=1.0),
        "good-client": lambda: good_client(host, port, ca),
    }
    out = {}

    def run(name, fn):
        try:
            out[name] = fn()
        except Exception as e:  # reported, the test decides
            out[name] = {"error": repr(e)}
    threads = [threading.Thread(target=run, args=item) for item in probes.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
