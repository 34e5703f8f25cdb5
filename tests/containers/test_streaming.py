"""Exec, Attach and PortForward through the streaming server, driven by
third-party clients: SPDY through spdystream (Go, as kubectl and kubelet)
and WebSocket through python3-websocket. The clients run in the daemon's
network namespace, where the server listens on 127.0.0.1."""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time

import grpc
import pytest

from .conftest import children_of, exe_writable, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
STREAM = os.path.join(HERE, "..", "stream")


@pytest.fixture(scope="session")
def spdyclient(tmp_path_factory):
    if not shutil.which("go") or not os.path.isdir(
            "/usr/share/gocode/src/github.com/moby/spdystream"):
        pytest.skip("golang-go or golang-github-docker-spdystream-dev missing: "
                    "scripts/install-deps test")
    out = tmp_path_factory.mktemp("spdyclient")
    env = dict(os.environ, GO111MODULE="off", GOPATH="/usr/share/gocode",
               GOCACHE=str(out / "cache"), GOFLAGS="")
    subprocess.run(["go", "build", "-o", str(out / "spdyclient"),
                    os.path.join(STREAM, "spdyclient.go")], check=True, env=env, timeout=300)
    shutil.rmtree(out / "cache", ignore_errors=True)
    return str(out / "spdyclient")


def in_netns(env, argv):
    return ["nsenter", "-t", str(env.d.holder.pid), "--net", "--"] + argv


def spdy(env, client, *args, input=None, timeout=120):
    return subprocess.run(in_netns(env, [client] + list(args)), input=input,
                          capture_output=True, timeout=timeout)


def ws(env, *args, timeout=120):
    p = subprocess.run(in_netns(env, ["/usr/bin/python3", os.path.join(STREAM, "wsclient.py")]
                                + list(args)), capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p.stdout


def status_of(stderr):
    line = [l for l in stderr.decode().splitlines() if l.startswith("STATUS ")][-1]
    text = line[len("STATUS "):]
    return json.loads(text) if text.startswith("{") else text


def exec_url(env, cid, cmd, **kw):
    kw.setdefault("stdout", True)
    kw.setdefault("stderr", not kw.get("tty"))
    return env.rs.Exec(env.pb.ExecRequest(container_id=cid, cmd=cmd, **kw), timeout=10).url


@pytest.fixture
def running(env):
    pod = env.pod()
    cid = env.run(pod, "x", ["/bin/sleep", "100000"])
    return env, pod, cid


def test_exec_output_and_status(running, spdyclient):
    env, _, cid = running
    url = exec_url(env, cid, ["/bin/sh", "-c", "echo out; echo err >&2"])
    assert url.startswith("http://127.0.0.1:")
    p = spdy(env, spdyclient, "exec", url)
    assert (p.stdout, p.stderr.splitlines()[0]) == (b"out\n", b"err")
    assert status_of(p.stderr) == {"metadata": {}, "status": "Success"}
    for code, cmd in ((1, "exit 1"), (137, "kill -9 $$")):
        p = spdy(env, spdyclient, "exec", exec_url(env, cid, ["/bin/sh", "-c", cmd]))
        st = status_of(p.stderr)
        assert st["status"] == "Failure" and st["reason"] == "NonZeroExitCode"
        assert st["details"]["causes"] == [{"reason": "ExitCode", "message": str(code)}]
    # a command that cannot run: a shell's code and the reason on stderr
    for code, cmd in ((127, "/no/such/binary"), (126, "/etc/passwd")):
        p = spdy(env, spdyclient, "exec", exec_url(env, cid, [cmd]))
        st = status_of(p.stderr)
        assert st["details"]["causes"] == [{"reason": "ExitCode", "message": str(code)}], st
        assert cmd.encode() in p.stderr, p.stderr
    # the same URL twice: single use
    p = spdy(env, spdyclient, "exec", url)
    assert p.returncode == 98 and p.stdout.startswith(b"HTTP 404")


def test_exec_stdin_and_protocols(running, spdyclient):
    env, _, cid = running
    data = os.urandom(1 << 20)
    url = exec_url(env, cid, ["/bin/sh", "-c", "cat | sha256sum"], stdin=True)
    p = spdy(env, spdyclient, "exec", url, "-stdin", input=data)
    assert p.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()
    # the oldest protocol: no status on success, text on failure
    p = spdy(env, spdyclient, "exec", exec_url(env, cid, ["/bin/false"]), "-proto",
             "channel.k8s.io")
    assert "non-zero exit code" in status_of(p.stderr)
    for proto in ("v5.channel.k8s.io", "v3.channel.k8s.io,v2.channel.k8s.io"):
        p = subprocess.run(in_netns(env, [spdyclient, "upgrade",
                                          exec_url(env, cid, ["/bin/true"]), "-proto", proto]),
                           capture_output=True, text=True, timeout=30)
        assert p.stdout.split() == ["101", proto.split(",")[0]]
    p = subprocess.run(in_netns(env, [spdyclient, "upgrade", exec_url(env, cid, ["/bin/true"]),
                                      "-proto", "v9.channel.k8s.io"]),
                       capture_output=True, text=True, timeout=30)
    assert p.stdout.split()[0] == "403"


def test_exec_tty_and_resize(running, spdyclient):
    env, _, cid = running
    # the resize may come after the command starts: wait for it (5 s at most)
    script = ("for i in $(seq 100); do [ \"$(stty size 2>/dev/null)\" = '30 100' ] && break; "
              "sleep 0.05; done; stty size; tty")
    url = exec_url(env, cid, ["/bin/sh", "-c", script], tty=True, stdin=True)
    p = spdy(env, spdyclient, "exec", url, "-tty", "-stdin", "-resize", "100x30", input=b"")
    lines = p.stdout.decode().replace("\r", "").split("\n")
    assert lines[0] == "30 100", p.stdout
    assert lines[1].startswith("/dev/pts/")
    assert status_of(p.stderr)["status"] == "Success"


def test_exec_big_output_slow_reader(running, spdyclient):
    env, _, cid = running
    url = exec_url(env, cid, ["/bin/sh", "-c", "head -c 104857600 /dev/zero"], stderr=False)
    rss0 = env.d.rss_kb()
    proc = subprocess.Popen(in_netns(env, [spdyclient, "exec", url, "-stderr=false"]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # nobody reads for a while: the daemon must not buffer what waits (an
    # ASan build keeps freed memory in quarantine: its RSS says nothing)
    first = proc.stdout.read(1 << 20)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and not env.d.sanitized():
        assert env.d.rss_kb() < rss0 + 16 * 1024, "the daemon buffers a stalled stream"
        time.sleep(0.2)
    total = len(first)
    while chunk := proc.stdout.read(1 << 20):
        total += len(chunk)
    proc.wait(timeout=60)
    assert total == 100 << 20


def test_client_vanishing_ends_the_command(running, spdyclient):
    env, _, cid = running
    fds = len(env.d.fds())
    url = exec_url(env, cid, ["/bin/sleep", "4242"])
    proc = subprocess.Popen(in_netns(env, [spdyclient, "exec", url]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def sleepers():
        r = env.rs.ExecSync(env.pb.ExecSyncRequest(container_id=cid, cmd=["ps", "-o", "args"]),
                            timeout=30)
        return r.stdout.decode().count("sleep 4242")

    wait_for(lambda: sleepers() == 1, what="the exec'd command to run")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    wait_for(lambda: sleepers() == 0, what="the command to be killed")
    wait_for(lambda: len(env.d.fds()) <= fds, what="the daemon's fds to settle")


def test_attach(env, spdyclient):
    pb = env.pb
    pod = env.pod()
    counter = env.run(pod, "counter", ["/bin/sh", "-c",
                                       "i=0; while :; do echo n$i; i=$((i+1)); sleep 0.1; done"])
    url = env.rs.Attach(pb.AttachRequest(container_id=counter, stdout=True, stderr=True),
                        timeout=10).url
    proc = subprocess.Popen(in_netns(env, [spdyclient, "exec", url]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = proc.stdout.readline()
    assert line.startswith(b"n")
    proc.kill()
    proc.wait()
    assert env.status(counter).status.state == pb.CONTAINER_RUNNING
    # a container reading stdin; stdin_once: the first detach closes it
    cat = env.run(pod, "cat", ["/bin/sh", "-c", "cat; echo closed"], stdin=True,
                  stdin_once=True)
    url = env.rs.Attach(pb.AttachRequest(container_id=cat, stdin=True, stdout=True,
                                         stderr=True), timeout=10).url
    p = spdy(env, spdyclient, "exec", url, "-stdin", input=b"hello\n")
    assert p.stdout == b"hello\nclosed\n"
    env.wait_exited(cat)
    with pytest.raises(grpc.RpcError) as e:
        env.rs.Attach(pb.AttachRequest(container_id=cat, stdout=True), timeout=10)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def httpd(env, pod, script):
    """A container serving /www on port 8080 with busybox httpd, ready."""
    srv = env.run(pod, "httpd", ["/bin/sh", "-c", script + " && exec httpd -f -p 8080 -h /www"])
    wait_for(lambda: env.rs.ExecSync(env.pb.ExecSyncRequest(
        container_id=srv, cmd=["wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8080/s"]),
        timeout=30).exit_code == 0, what="httpd to serve", timeout=60)
    return srv


HTTPD = ("mkdir -p /www && head -c 104857600 /dev/urandom > /www/big && echo small > /www/s "
         "&& sha256sum /www/big > /www/big.sum")


def test_port_forward(env, spdyclient):
    pb = env.pb
    pod = env.pod()
    srv = httpd(env, pod, HTTPD)
    big_sum = env.rs.ExecSync(pb.ExecSyncRequest(container_id=srv, cmd=["cat", "/www/big.sum"]),
                              timeout=30).stdout.split()[0].decode()

    def url():
        return env.rs.PortForward(pb.PortForwardRequest(pod_sandbox_id=pod[0], port=[8080]),
                                  timeout=10).url

    small = hashlib.sha256(b"small\n").hexdigest()
    p = spdy(env, spdyclient, "portforward", url(), "8080", "-n", "50", "-body", "-request",
             r"GET /s HTTP/1.0\r\n\r\n")
    lines = p.stdout.decode().split("\n")[:50]
    assert lines == [f"6 {small}"] * 50, p.stdout[:500]
    # 100 MiB, checked by hash
    p = spdy(env, spdyclient, "portforward", url(), "8080", "-body", "-request",
             r"GET /big HTTP/1.0\r\n\r\n", timeout=300)
    assert p.stdout.decode().split() == [str(100 << 20), big_sum], p.stdout[:300]
    out = ws(env, "portforward", url(), "8080", "--body", "--request",
             r"GET /big HTTP/1.0\r\n\r\n", timeout=300)
    assert out.split() == [str(100 << 20), big_sum], out
    # nothing listens: the error stream says so
    p = spdy(env, spdyclient, "portforward", url(), "9", "-request", "x")
    assert p.stdout.startswith(b"ERROR error forwarding port 9"), p.stdout
    # WebSocket
    out = ws(env, "portforward", url(), "8080", "--request", r"GET /s HTTP/1.0\r\n\r\n")
    assert not out.startswith("ERROR") and int(out.split()[0]) > 6, out




def test_websocket_exec(running):
    env, _, cid = running
    out = json.loads(ws(env, "exec", exec_url(env, cid, ["/bin/sh", "-c", "echo o; echo e >&2"])))
    assert out["1"] == "o\n" and out["2"] == "e\n"
    assert json.loads(out["3"])["status"] == "Success"
    out = json.loads(ws(env, "exec", exec_url(env, cid, ["/bin/sh", "-c", "exit 3"]),
                        "--proto", "base64.channel.k8s.io"))
    assert json.loads(out["3"])["details"]["causes"][0]["message"] == "3"
    # v5: the client closes stdin with the close signal
    out = json.loads(ws(env, "exec", exec_url(env, cid, ["/bin/sh", "-c", "cat; echo eof"],
                                              stdin=True),
                        "--proto", "v5.channel.k8s.io", "--stdin", "in\n", "--close-stdin"))
    assert out["1"] == "in\neof\n"


WS_ATTACKS = [
    # (case, subprotocol, what the server must answer)
    ("unmasked", "v4.channel.k8s.io", {"close 1002"}),
    ("huge", "v4.channel.k8s.io", {"close 1002"}),  # a 2^63-byte frame
    ("control126", "v4.channel.k8s.io", {"close 1002"}),
    ("rsv", "v4.channel.k8s.io", {"close 1002"}),
    ("opcode", "v5.channel.k8s.io", {"close 1002"}),
    ("badutf8", "base64.channel.k8s.io", {"close 1007"}),
    # past 1 MiB: 1009, or a reset that beat the close frame to the client
    ("endless", "v4.channel.k8s.io", {"close 1009", "dropped"}),
    ("ping", "v4.channel.k8s.io", {"pong are you there\nclose 1000"}),
]


def test_websocket_hostile_frames(running):
    """Frames RFC 6455 forbids, on a raw socket: each gets a close frame
    with the code the RFC says (or at least a dropped connection, never
    endless buffering), and leaves no process or fd behind."""
    env, _, cid = running
    fds = len(env.d.fds())

    def sleepers():
        r = env.rs.ExecSync(env.pb.ExecSyncRequest(container_id=cid, cmd=["ps", "-o", "args"]),
                            timeout=30)
        return r.stdout.decode().count("sleep 4244")

    for case, proto, want in WS_ATTACKS:
        url = exec_url(env, cid, ["/bin/sleep", "4244"])
        p = subprocess.run(in_netns(env, ["/usr/bin/python3", os.path.join(STREAM, "wsattack.py"),
                                          url, case, "--proto", proto]),
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, (case, p.stderr)
        assert p.stdout.strip() in want, (case, p.stdout, p.stderr)
        wait_for(lambda: sleepers() == 0, what=f"the command of `{case}` to be killed")
        wait_for(lambda: len(env.d.fds()) <= fds, what=f"the daemon's fds to settle ({case})")


def test_websocket_slow_reader(running):
    """Over WebSocket too, a client that stops reading pauses the command's
    output: the daemon does not buffer what waits, and nothing is lost."""
    env, _, cid = running
    size = 32 << 20
    url = exec_url(env, cid, ["/bin/sh", "-c", f"head -c {size} /dev/zero"], stderr=False)
    rss0 = env.d.rss_kb()
    proc = subprocess.Popen(in_netns(env, ["/usr/bin/python3", os.path.join(STREAM, "wsattack.py"),
                                           url, "slowread"]),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline() == "stalled\n", proc.stderr.read()
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and not env.d.sanitized():
            assert env.d.rss_kb() < rss0 + 16 * 1024, "the daemon buffers a stalled stream"
            time.sleep(0.2)
        out, err = proc.communicate("go\n", timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert out.split("\n")[:2] == [f"read {size}", "close 1000"], (out, err)


def test_bad_requests(running):
    env, _, cid = running
    url = exec_url(env, cid, ["/bin/true"])
    hostport = url.split("/")[2]
    script = r"""
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
def ask(data):
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(data)
    out = b""
    while True:
        try:
            c = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not c:
            break
        out += c
    return out.split(b"\r\n")[0].decode()
tok = sys.argv[2]
print(ask(b"GET /exec/" + tok.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n"))
print(ask(b"GET /exec/nope HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n"))
print(ask(b"GARBAGE\r\n\r\n"))
print(ask(b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n"))
"""
    tok = url.rsplit("/", 1)[1]
    p = subprocess.run(in_netns(env, ["/usr/bin/python3", "-c", script, hostport, tok]),
                       capture_output=True, text=True, timeout=60)
    lines = p.stdout.splitlines()
    assert lines[0].startswith("HTTP/1.1 400"), p.stdout  # no upgrade (and the token is spent)
    assert lines[1].startswith("HTTP/1.1 404")
    assert lines[2].startswith("HTTP/1.1 400")
    assert lines[3].startswith("HTTP/1.1 431")
    # the daemon is fine
    env.rs.Version(env.pb.VersionRequest(), timeout=10)
    with pytest.raises(grpc.RpcError) as e:
        env.rs.Exec(env.pb.ExecRequest(container_id=cid, cmd=["x"]), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:
        env.rs.Exec(env.pb.ExecRequest(container_id=cid, cmd=["x"], tty=True, stdout=True,
                                       stderr=True), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.slow
def test_token_expires(running, spdyclient):
    env, _, cid = running
    url = exec_url(env, cid, ["/bin/true"])
    time.sleep(61)  # the token's lifetime is one minute
    p = spdy(env, spdyclient, "exec", url)
    assert p.returncode == 98 and p.stdout.startswith(b"HTTP 404")


def self_signed(tmp_path):
    """A certificate for localhost and its key (the certificate is its own CA)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def test_tls(env_factory, spdyclient, tmp_path):
    """--stream-tls-cert/--stream-tls-key: https URLs, exec and port-forward
    through TLS with a test CA, and plain HTTP refused on that port."""
    cert, key = self_signed(tmp_path)
    ca = tmp_path / "ca.pem"
    ca.write_bytes(cert.read_bytes())
    env = env_factory(["--stream-tls-cert", str(cert), "--stream-tls-key", str(key)])
    pod = env.pod()
    cid = env.run(pod, "x", ["/bin/sleep", "100000"])
    url = exec_url(env, cid, ["/bin/sh", "-c", "echo secret; exit 5"])
    assert url.startswith("https://127.0.0.1:"), env.d.logtext()[:3000]
    p = subprocess.run(in_netns(env, ["env", f"SPDYCLIENT_CA={ca}", spdyclient, "exec", url]),
                       capture_output=True, timeout=120)
    assert p.stdout == b"secret\n", p.stderr
    assert status_of(p.stderr)["details"]["causes"][0]["message"] == "5"
    # a client speaking plain HTTP gets no answer it can use, and the daemon is fine
    plain = exec_url(env, cid, ["/bin/true"]).replace("https://", "http://")
    p = subprocess.run(in_netns(env, [spdyclient, "exec", plain]), capture_output=True,
                       timeout=120)
    assert p.returncode != 0 and b"secret" not in p.stdout
    env.rs.Version(env.pb.VersionRequest(), timeout=10)
    # WebSocket over TLS
    out = json.loads(ws(env, "exec", exec_url(env, cid, ["/bin/echo", "wss"]), "--ca", str(ca)))
    assert out["1"] == "wss\n", out


def is_static_binary(path):
    """Whether the ELF file at path has no program interpreter (PT_INTERP):
    a static binary, which maps no shared library, lazily or otherwise."""
    import struct
    with open(path, "rb") as f:
        head = f.read(64)
        phoff, = struct.unpack_from("<Q", head, 32)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != 3 for i in range(phnum))


def test_tls_refuses_hostile_and_outdated_clients(pod_daemon_factory, tmp_path):
    """What an attacker or an outdated client sends to the TLS port
    (tests/stream/tlsprobe.py): plain HTTP, random bytes, a record longer
    than TLS allows, a ClientHello whose lengths lie get the connection
    closed at once; TLS 1.1, 1.0 and SSL 3 get a protocol_version alert, RSA
    key exchange, CBC, 3DES, RC4 and NULL a handshake_failure alert; half a
    ClientHello, or one sent a byte a second, is cut by the 10 s deadline
    for the request head. A current client gets TLS 1.2 with ECDHE and an
    AEAD. No fd stays behind, and until the first connection the daemon maps
    no TLS library."""
    cert, key = self_signed(tmp_path)
    d = pod_daemon_factory(extra_args=["--stream-tls-cert", str(cert),
                                       "--stream-tls-key", str(key)])

    def tls_maps():
        with open(f"/proc/{d.pid}/maps") as f:
            return sorted({l.split()[-1] for l in f if re.search(r"/lib(mbed|ssl|crypto)", l)})
    m = wait_for(lambda: re.search(r"streaming server on 127\.0\.0\.1:(\d+) \(TLS\)",
                                   d.logtext()), what="the streaming server")
    assert tls_maps() == []
    fds = d.settled_fds()  # once the start-up probes of the gRPC socket are closed
    p = subprocess.run(["nsenter", "-t", str(d.holder.pid), "--net", "--", "/usr/bin/python3",
                        os.path.join(STREAM, "tlsprobe.py"), "127.0.0.1", m.group(1), str(cert)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    for name in ("plain-http", "garbage", "oversized-record"):
        assert r[name]["closed"] and r[name]["seconds"] < 5, (name, r[name])
        assert r[name]["first"] in ("nothing", "alert"), (name, r[name])
    refused = {"bad-lengths": 50, "tls1.0-only": 70, "tls1.1-only": 70, "ssl3-only": 70,
               "weak-ciphers": 40}  # decode_error, protocol_version, handshake_failure
    for name, alert in refused.items():
        got = r[name]
        assert (got["first"], got.get("level"), got.get("description"), got["closed"]) == (
            "alert", 2, alert, True), (name, got)
        assert got["seconds"] < 5, (name, got)
    assert (r["modern"]["first"], r["modern"].get("type")) == ("handshake", 2), r["modern"]
    for name in ("truncated", "slow"):
        assert r[name]["closed"] and 8 <= r[name]["seconds"] <= 20, (name, r[name])
    good = r["good-client"]
    assert good.get("version") == "TLSv1.2", good
    assert re.fullmatch(r"ECDHE-RSA-(AES\d+-GCM-SHA\d+|CHACHA20-POLY1305)", good["cipher"]), good
    if not is_static_binary(d.binary):  # the static binary has mbedTLS linked in
        assert any("libmbedtls" in l for l in tls_maps()), tls_maps()
    wait_for(lambda: len(d.fds()) == fds, timeout=60,
             what=f"the daemon to close every probe's connection ({fds} fds)")
    rc = d.stop()
    assert rc == 0, f"daemon exited with {rc}:\n{d.logtext()[-4000:]}"


def test_bad_tls_files_are_refused(pod_daemon_factory, tmp_path):
    """Each bad file stops the start with a message naming it (they are
    parsed in a child process: its message must reach the log)."""
    bogus = tmp_path / "bogus.pem"
    bogus.write_text("not a certificate\n")
    cert, key = self_signed(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    _, other_key = self_signed(other)
    missing = tmp_path / "missing.pem"
    cases = [
        (bogus, bogus, f"the streaming certificate `{bogus}`: "),
        (cert, bogus, f"the streaming key `{bogus}`: "),
        (cert, other_key, f"the streaming key does not match the certificate `{cert}`: "),
        (missing, key, f"the streaming certificate `{missing}`: No such file"),
        (cert, missing, f"the streaming key `{missing}`: No such file"),
    ]
    for c, k, want in cases:
        d = pod_daemon_factory(extra_args=["--stream-tls-cert", str(c), "--stream-tls-key",
                                           str(k)], start=False)
        d.start(wait=False)
        assert d.proc.wait(timeout=30) != 0
        assert want in d.logtext(), (want, d.logtext())


LIMITS = r"""
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
idle = [socket.create_connection((host, int(port)), timeout=30) for _ in range(256)]
extra = socket.create_connection((host, int(port)), timeout=30)
# past 256 connections: accepted and closed at once
print("extra", extra.recv(10) == b"")
for s in idle:
    s.close()
# a connection that sends no request head is closed (after 10 s); until the
# server has seen the others go, a new one is still dropped at once
for _ in range(50):
    t = time.monotonic()
    lone = socket.create_connection((host, int(port)), timeout=1)
    try:
        if lone.recv(10) == b"":
            lone.close()
            continue
    except socket.timeout:
        break
lone.settimeout(30)
print("head-timeout", lone.recv(10) == b"", 8 < time.monotonic() - t < 20)
"""


@pytest.mark.slow
def test_server_limits_and_timeouts(running, spdyclient):
    env, pod, cid = running
    hostport = exec_url(env, cid, ["/bin/true"]).split("/")[2]
    p = subprocess.run(in_netns(env, ["/usr/bin/python3", "-c", LIMITS, hostport]),
                       capture_output=True, text=True, timeout=120)
    assert p.stdout.split("\n")[:2] == ["extra True", "head-timeout True True"], p.stderr
    # a port-forward outlives the 30 s its streams had to arrive in
    httpd(env, pod, "mkdir -p /www && echo small > /www/s")
    url = env.rs.PortForward(env.pb.PortForwardRequest(pod_sandbox_id=pod[0], port=[8080]),
                             timeout=10).url
    p = spdy(env, spdyclient, "portforward", url, "8080", "-hold", "35s", "-body", "-request",
             r"GET /s HTTP/1.0\r\n\r\n")
    assert p.stdout.decode().split() == ["6", hashlib.sha256(b"small\n").hexdigest()], p.stdout


def test_exec_helpers_run_sealed(running, spdyclient):
    """No executor process stays for an exec session: its command is the
    daemon's own child, started by a short-lived copy of the daemon, which
    runs from its read-only view of the binary (CVE-2019-5736): writing
    through the daemon's /proc/PID/exe fails."""
    env, _, cid = running
    url = exec_url(env, cid, ["/bin/sleep", "4243"])
    proc = subprocess.Popen(in_netns(env, [spdyclient, "exec", url]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        kids = wait_for(lambda: (lambda k: k if [b"/bin/sleep", b"4243"] in
                                 [a for _, _, a in k.values()] else None)(
                                     children_of(env.d.proc.pid)), what="the exec's command")
        assert not [a for _, _, a in kids.values() if a[:1] == [b"kinglet"]], kids
        assert exe_writable(env.d.proc.pid) == (False, "overlayfs")
    finally:
        proc.kill()
        proc.wait()
