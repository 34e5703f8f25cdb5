#!/usr/bin/python3
"""A test client of kinglet's streaming server over WebSocket, through
Python's websocket-client (Debian python3-websocket): the channel
protocols (v4/v5 binary, base64) for exec/attach and port forwarding.

    wsclient.py exec URL [--proto P] [--stdin TEXT] [--close-stdin [--after TEXT]]
        prints what each channel carried as JSON: {"1": "...", "2": "...",
        "3": "..."} (channel number → text), once the server closes; with
        --after, stdin is closed only once stdout holds TEXT.
    wsclient.py portforward URL PORT [--request TEXT]
        prints "<bytes> <sha256>" of the data channel, or "ERROR <text>".
"""
import argparse
import base64
import hashlib
import json
import sys

import websocket


def connect(url, proto, ca=None):
    """ws://, or wss:// trusting the CA file ca (for an https URL)."""
    import ssl
    ws = websocket.WebSocket(sslopt={"ca_certs": ca, "cert_reqs": ssl.CERT_REQUIRED,
                                     "check_hostname": False} if ca else None)
    ws.connect(url.replace("https://", "wss://").replace("http://", "ws://"),
               subprotocols=[proto], timeout=120)
    return ws


def messages(ws):
    """The data messages until the server closes, as (opcode, bytes)."""
    while True:
        try:
            op, data = ws.recv_data()
        except websocket.WebSocketConnectionClosedException:
            return
        if op == websocket.ABNF.OPCODE_CLOSE:
            return
        if data:
            yield op, data


def exec_(a):
    ws = connect(a.url, a.proto, a.ca)
    b64 = a.proto.startswith("base64")

    def send(ch, data):
        if b64:
            ws.send(str(ch) + base64.b64encode(data).decode())
        else:
            ws.send_binary(bytes([ch]) + data)

    if a.stdin is not None:
        send(0, a.stdin.encode())
    close_due = a.close_stdin and a.after is None
    if close_due:
        ws.send_binary(bytes([255, 0]))
    out = {}
    for _, data in messages(ws):
        if b64:
            ch, payload = int(chr(data[0])), base64.b64decode(data[1:])
        else:
            ch, payload = data[0], data[1:]
        out.setdefault(str(ch), b"")
        out[str(ch)] += payload
        if a.close_stdin and not close_due and a.after.encode() in out.get("1", b""):
            close_due = True
            ws.send_binary(bytes([255, 0]))
    print(json.dumps({k: v.decode(errors="replace") for k, v in out.items()}))


def portforward(a):
    ws = connect(a.url + "?ports=" + a.port, "portforward.k8s.io")
    ws.send_binary(bytes([0]) + a.request.replace("\\r\\n", "\r\n").encode())
    h, n, err, seen = hashlib.sha256(), 0, b"", {0: 0, 1: 0}
    head = b"" if a.body else None  # --body: hash what follows the HTTP head
    for _, data in messages(ws):
        ch, payload = data[0], data[1:]
        if seen.get(ch, 0) == 0:  # each channel opens with its port
            seen[ch] = 1
            assert int.from_bytes(payload[:2], "little") == int(a.port), payload
            payload = payload[2:]
        if ch == 0 and head is not None:
            head += payload
            if b"\r\n\r\n" in head:
                payload, head = head.split(b"\r\n\r\n", 1)[1], None
            else:
                continue
        if ch == 0:
            h.update(payload)
            n += len(payload)
        elif ch == 1:
            err += payload
    print(f"ERROR {err.decode()}" if err else f"{n} {h.hexdigest()}")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    e = sub.add_parser("exec")
    e.add_argument("url")
    e.add_argument("--proto", default="v4.channel.k8s.io")
    e.add_argument("--stdin")
    e.add_argument("--close-stdin", action="store_true")
    e.add_argument("--after", help="with --close-stdin: once stdout holds this")
    e.add_argument("--ca", help="the CA of an https URL")
    f = sub.add_parser("portforward")
    f.add_argument("url")
    f.add_argument("port")
    f.add_argument("--request", default="")
    f.add_argument("--body", action="store_true", help="hash only the HTTP body")
    a = p.parse_args()
    {"exec": exec_, "portforward": portforward}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
