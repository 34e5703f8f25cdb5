"""The registry client's own HTTP/1.1 and TLS (src/image/http.c) against
what an attacker's registry would send: a header line of megabytes, an
endless chunked body, chunk sizes and lengths that overflow, answers cut
short, certificates for another name or from an unknown CA; and what
libcurl did that it keeps: client certificates, HTTPS through a CONNECT
proxy, no_proxy, http_proxy only in lowercase. Each hostile case fails the
pull with a clear message and leaves nothing in the store."""
import os
import socket
import ssl
import subprocess
import threading

import pytest

import imagelib
from imagelib import FakeRegistry


class RawServer:
    """Answers every request on 127.0.0.1 with handler(conn, request_head),
    over TLS when given a context."""

    def __init__(self, handler, tls=None):
        self.handler, self.tls = handler, tls
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.host = f"127.0.0.1:{self.port}"
        self.requests = []
        self.conns = []
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            if self.tls:
                c = self.tls.wrap_socket(c, server_side=True)
                self.conns.append(c)
            head = b""
            while b"\r\n\r\n" not in head:
                d = c.recv(4096)
                if not d or (not self.tls and not head and d[:1] == b"\x16"):
                    return  # a TLS hello on plain HTTP: refused, as servers do
                head += d
            self.requests.append(head)
            self.handler(c, head)
        except (OSError, ssl.SSLError):
            pass
        finally:
            try:
                c.close()
            except OSError:
                pass

    def stop(self):
        self.stopping = True
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
        self.thread.join(5)


@pytest.fixture
def raw():
    servers = []

    def make(handler, tls=None):
        s = RawServer(handler, tls)
        servers.append(s)
        return s
    yield make
    for s in servers:
        s.stop()


def pull_fails(kimage, host, opts=None, env=None):
    p = subprocess.run([kimage.binary, "image", "--root", kimage.root] +
                       (opts if opts is not None else ["--insecure-registry", host]) +
                       ["pull", f"{host}/x/busybox:latest"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 1, p.stderr
    assert kimage.tmp_entries() == []
    return p.stderr


def send_forever(c, chunk):
    try:
        while True:
            c.sendall(chunk)
    except OSError:
        pass


def test_header_line_of_megabytes(kimage, raw):
    def h(c, _):
        c.sendall(b"HTTP/1.1 200 OK\r\nX-Huge: ")
        send_forever(c, b"a" * 65536)
    s = raw(h)
    err = pull_fails(kimage, s.host)
    assert "response head larger than" in err, err
    assert len(s.requests) == 1, "not retried: the answer is malformed"


def test_endless_chunked_body(kimage, raw):
    def h(c, _):
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: " + imagelib.MT_OCI_MANIFEST.encode() +
                  b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        send_forever(c, b"10000\r\n" + b"{" * 0x10000 + b"\r\n")
    s = raw(h)
    err = pull_fails(kimage, s.host)
    assert "larger than 4194304 bytes" in err, err


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1ffffffffffffffffffff\r\nxx",
    b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\nxx",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx",
    b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 001 OK\r\nContent-Length: 0\r\n\r\n",
    b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
], ids=["chunk-size-overflow", "length-overflow", "two-lengths", "bad-status", "status-001", "not-http"])
def test_malformed_answer(kimage, raw, answer):
    def h(c, _):
        c.sendall(answer)
        c.recv(1)  # until we hang up
    s = raw(h)
    err = pull_fails(kimage, s.host)
    assert "malformed response" in err, err


@pytest.mark.parametrize("answer,why", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"{" * 100,
     "connection closed before the end of the response"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n0123456789",
     "connection closed before the end of the response"),
    (b"HTTP/1.1 200 OK\r\nContent-Len", "connection closed in the response head"),
    (b"", "connection closed without an answer"),
], ids=["length", "chunked", "head", "nothing"])
def test_truncated_answer_is_retried_then_fails(kimage, raw, answer, why):
    def h(c, _):
        c.sendall(answer)
    s = raw(h)
    err = pull_fails(kimage, s.host)
    assert why in err, err
    assert len(s.requests) == 4, "transient: retried as a network failure"


def make_cert(pki, name, san, ca="ca"):
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
        "-keyout", f"{pki}/{name}.key", "-out", f"{pki}/{name}.csr")
    with open(f"{pki}/{name}.cnf", "w") as f:
        f.write(f"subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\n")
    run("openssl", "x509", "-req", "-in", f"{pki}/{name}.csr", "-CA", f"{pki}/{ca}.crt",
        "-CAkey", f"{pki}/{ca}.key", "-CAcreateserial", "-days", "2", "-extfile",
        f"{pki}/{name}.cnf", "-out", f"{pki}/{name}.crt")
    return f"{pki}/{name}.crt", f"{pki}/{name}.key"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("httppki"))
    return imagelib.make_ca(d)


def certs_for(tmp_path, host, ca_file, extra=()):
    d = tmp_path / "certs.d"
    (d / host).mkdir(parents=True, exist_ok=True)
    (d / host / "ca.crt").write_bytes(open(ca_file, "rb").read())
    for src, name in extra:
        (d / host / name).write_bytes(open(src, "rb").read())
    return str(d)


def tls_ctx(cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


def test_tls_host_names_are_checked(kimage, fake, images, pki, tmp_path):
    """The right names pass: an IP address (checked by us: mbedTLS 2.28
    matches DNS names only) and a DNS name (checked by mbedTLS)."""
    f = fake(pki=pki)
    for host in (f.host, f"localhost:{f.port}"):
        out = kimage.run("pull", f"{host}/x/busybox:busybox",
                         opts=["--certs-dir", certs_for(tmp_path, host, f"{pki}/ca.crt")])
        assert out.stdout.split() == [images["busybox"].id]
        kimage.run("rm", f"{host}/x/busybox:busybox")


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost"])
def test_tls_certificate_for_another_name(kimage, raw, pki, tmp_path, name):
    other = make_cert(pki, f"other-{name}", "DNS:other.example,IP:127.0.0.2")
    s = raw(lambda c, _: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
            tls=tls_ctx(*other))
    host = f"{name}:{s.port}"
    err = pull_fails(kimage, host, opts=["--certs-dir", certs_for(tmp_path, host,
                                                                  f"{pki}/ca.crt")])
    assert "server certificate verification failed" in err and "CN" in err, err
    assert s.requests == [], "nothing was sent to the wrong server"


def test_tls_unknown_ca(kimage, raw, pki, tmp_path):
    stranger = imagelib.make_ca(str(tmp_path / "stranger"))
    s = raw(lambda c, _: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
            tls=tls_ctx(f"{stranger}/server.crt", f"{stranger}/server.key"))
    err = pull_fails(kimage, s.host, opts=["--certs-dir", certs_for(tmp_path, s.host,
                                                                    f"{pki}/ca.crt")])
    assert "server certificate verification failed" in err and "not correctly signed" in err, err
    assert s.requests == []
    # configured insecure: no verification, as before
    err = pull_fails(kimage, s.host, opts=["--insecure-registry", s.host])
    assert len(s.requests) >= 1, err


def test_client_certificate(kimage, fake, images, pki, tmp_path):
    """A registry that requires a client certificate (mTLS) gets the one of
    certs.d (client.cert, client.key), as with curl's SSLCERT/SSLKEY."""
    client = make_cert(pki, "client", "DNS:kinglet-client")
    ctx = tls_ctx(f"{pki}/server.crt", f"{pki}/server.key")
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(f"{pki}/ca.crt")
    f = fake(pki=pki, tls_ctx=ctx)
    ref = f"{f.host}/x/busybox:busybox"
    err = pull_fails(kimage, f.host, opts=["--certs-dir",
                                           certs_for(tmp_path / "a", f.host, f"{pki}/ca.crt")])
    assert "TLS" in err, err
    d = certs_for(tmp_path / "b", f.host, f"{pki}/ca.crt",
                  [(client[0], "client.cert"), (client[1], "client.key")])
    out = kimage.run("pull", ref, opts=["--certs-dir", d])
    assert out.stdout.split() == [images["busybox"].id]


def make_intermediate(pki, name, constraints):
    """An intermediate CA under the test root with the given (non-critical)
    nameConstraints, as `openssl x509 -extfile` writes them."""
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
        "-keyout", f"{pki}/{name}.key", "-out", f"{pki}/{name}.csr")
    with open(f"{pki}/{name}.cnf", "w") as f:
        f.write("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n"
                f"nameConstraints={constraints}\n")
    run("openssl", "x509", "-req", "-in", f"{pki}/{name}.csr", "-CA", f"{pki}/ca.crt",
        "-CAkey", f"{pki}/ca.key", "-CAcreateserial", "-days", "2", "-extfile",
        f"{pki}/{name}.cnf", "-out", f"{pki}/{name}.crt")
    return name


def served_chain(pki, leaf, ca=None):
    """A server context presenting leaf (make_cert's pair) and, when ca
    names an intermediate, that intermediate after it."""
    cert, key = leaf
    if ca:
        chain = f"{cert}.chain"
        with open(chain, "wb") as f:
            f.write(open(cert, "rb").read() + open(f"{pki}/{ca}.crt", "rb").read())
        cert = chain
    return tls_ctx(cert, key)


def pull_via_proxy(kimage, host, certs, proxy):
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["https_proxy"] = f"http://127.0.0.1:{proxy.port}"
    return subprocess.run([kimage.binary, "image", "--root", kimage.root, "--certs-dir", certs,
                           "pull", f"{host}/x/busybox:busybox"],
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture
def proxy():
    p = ConnectProxy()
    yield p
    p.stop()


@pytest.mark.parametrize("leaf_name,san,ca,host,why", [
    # an intermediate limited to .good.test (non-critical, as most are)
    ("nc-evil", "DNS:evil.test", "int-good", "evil.test", "name constraints of `CN=int-good`"),
    ("nc-bare", "DNS:good.test", "int-good", "good.test", "name constraints of `CN=int-good`"),
    # excluded subtrees hold even when a wildcard covers the host
    ("nc-excl", "DNS:*.good.test", "int-excl", "bad.good.test",
     "name constraints of `CN=int-excl`"),
    # wildcards as curl and OpenSSL take them
    ("wild-tld", "DNS:*.test", None, "evil.test", "CN"),
    ("wild-partial", "DNS:f*.good.test", None, "foo.good.test", "CN"),
    ("wild-inner", "DNS:a.*.test", None, "a.b.test", "CN"),
    ("wild-deep", "DNS:*.good.test", None, "a.b.good.test", "CN"),
])
def test_tls_names_refused(kimage, raw, pki, tmp_path, proxy, leaf_name, san, ca, host, why):
    """Names mbedTLS 2.28 accepts and curl/OpenSSL refuse: a leaf outside
    its intermediate's (non-critical) name constraints, and wildcards over
    a whole top-level domain, inside a label or not left-most. The pull
    fails in the handshake, nothing is sent."""
    make_intermediate(pki, "int-good", "permitted;DNS:.good.test")
    make_intermediate(pki, "int-excl", "permitted;DNS:.good.test,excluded;DNS:bad.good.test")
    leaf = make_cert(pki, leaf_name, san, ca=ca or "ca")
    s = raw(lambda c, _: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
            tls=served_chain(pki, leaf, ca))
    h = f"{host}:{s.port}"
    p = pull_via_proxy(kimage, h, certs_for(tmp_path, h, f"{pki}/ca.crt"), proxy)
    assert p.returncode == 1, p.stdout
    assert "server certificate verification failed" in p.stderr and why in p.stderr, p.stderr
    assert s.requests == [], "nothing was sent to the wrong server"
    assert kimage.tmp_entries() == []


def test_tls_ip_name_constraints(kimage, raw, pki, tmp_path):
    """An intermediate limited to 10.0.0.0/8 cannot vouch for 127.0.0.1;
    one limited to 127.0.0.0/8 can."""
    for name, net, ok in (("int-ten", "IP:10.0.0.0/255.0.0.0", False),
                          ("int-lo", "IP:127.0.0.0/255.0.0.0", True)):
        make_intermediate(pki, name, f"permitted;{net}")
        leaf = make_cert(pki, f"ip-{name}", "IP:127.0.0.1", ca=name)
        s = raw(lambda c, _: c.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"),
                tls=served_chain(pki, leaf, name))
        err = pull_fails(kimage, s.host, opts=["--certs-dir",
                                               certs_for(tmp_path / name, s.host,
                                                         f"{pki}/ca.crt")])
        if ok:
            assert "verification failed" not in err and len(s.requests) >= 1, err
        else:
            assert f"name constraints of `CN={name}`" in err, err
            assert s.requests == []


def test_tls_names_accepted(kimage, fake, images, pki, tmp_path, proxy):
    """What stays valid: a wildcard over a name of its constrained
    intermediate's domain, and an exact name under the constraints."""
    make_intermediate(pki, "int-good", "permitted;DNS:.good.test")
    for leaf_name, san, host in (("ok-wild", "DNS:*.good.test", "a.good.test"),
                                 ("ok-exact", "DNS:Reg.Good.test", "reg.good.test")):
        leaf = make_cert(pki, leaf_name, san, ca="int-good")
        f = fake(pki=pki, tls_ctx=served_chain(pki, leaf, "int-good"))
        h = f"{host}:{f.port}"
        p = pull_via_proxy(kimage, h, certs_for(tmp_path / leaf_name, h,
                                                f"{pki}/ca.crt"), proxy)
        assert p.returncode == 0, p.stderr
        assert p.stdout.split() == [images["busybox"].id]
        kimage.run("rm", f"{h}/x/busybox:busybox")


class ConnectProxy:
    """An http proxy that only tunnels (CONNECT), to 127.0.0.1 whatever the
    host asked for; records the CONNECT lines."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.lines = []
        self.threads = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        head = b""
        while b"\r\n\r\n" not in head:
            d = c.recv(1)
            if not d:
                c.close()
                return
            head += d
        line = head.split(b"\r\n")[0].decode()
        self.lines.append(line)
        method, target, _ = line.split(" ", 2)
        if method != "CONNECT":
            c.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            c.close()
            return
        up = socket.create_connection(("127.0.0.1", int(target.rsplit(":", 1)[1])))
        c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")

        def pump(a, b):
            try:
                while True:
                    d = a.recv(65536)
                    if not d:
                        break
                    b.sendall(d)
            except OSError:
                pass
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        t = threading.Thread(target=pump, args=(up, c), daemon=True)
        t.start()
        pump(c, up)
        t.join(5)
        c.close()
        up.close()

    def stop(self):
        self.sock.close()


def test_https_through_a_connect_proxy(kimage, fake, images, pki, tmp_path):
    """https_proxy: a CONNECT tunnel, TLS to the registry inside it (its
    name checked: registry.invalid, which only the proxy can reach)."""
    make_cert(pki, "invalid", "DNS:registry.invalid")
    f = fake(pki=pki, tls_ctx=tls_ctx(f"{pki}/invalid.crt", f"{pki}/invalid.key"))
    proxy = ConnectProxy()
    try:
        host = f"registry.invalid:{f.port}"
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        env["HTTPS_PROXY"] = f"127.0.0.1:{proxy.port}"  # no scheme: http://, as curl takes it
        p = subprocess.run([kimage.binary, "image", "--root", kimage.root, "--certs-dir",
                            certs_for(tmp_path, host, f"{pki}/ca.crt"), "pull",
                            f"{host}/x/busybox:busybox"],
                           capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 0, p.stderr
        assert p.stdout.split() == [images["busybox"].id]
        assert f"CONNECT {host} HTTP/1.1" in proxy.lines
    finally:
        proxy.stop()


def test_no_proxy_and_uppercase_http_proxy(kimage, registry, images):
    """no_proxy exempts a host (by name, or by address and prefix length),
    and HTTP_PROXY in capitals is ignored for http (libcurl's rule against
    httpoxy): a dead proxy in either case is never used."""
    dead_port = imagelib.free_port()
    dead = f"http://127.0.0.1:{dead_port}"
    base = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    ref = f"{registry.host}/busybox:latest"
    for extra in ({"http_proxy": dead, "no_proxy": "example.com,127.0.0.0/8"},
                  {"http_proxy": dead, "NO_PROXY": "127.0.0.1"},
                  {"all_proxy": dead, "no_proxy": "*"},
                  {"HTTP_PROXY": dead}):
        p = subprocess.run([kimage.binary, "image", "--root", kimage.root, "--insecure-registry",
                            registry.host, "pull", ref],
                           capture_output=True, text=True, timeout=120, env=dict(base, **extra))
        assert p.returncode == 0, (extra, p.stderr)
        kimage.run("rm", ref)
    # and a proxy that is not exempted is used (and fails here)
    p = subprocess.run([kimage.binary, "image", "--root", kimage.root, "--insecure-registry",
                        registry.host, "pull", ref],
                       capture_output=True, text=True, timeout=120,
                       env=dict(base, all_proxy=dead, no_proxy="127.0.0.2,example.com"))
    assert p.returncode == 1 and f"Failed to connect to 127.0.0.1 port {dead_port}" in p.stderr, \
        p.stderr


def test_tls_sessions_resumed_and_connections_reused(kimage, fake, images, pki, tmp_path):
    """Parallel layer downloads resume the first TLS session instead of
    full handshakes, and keep-alive connections carry several requests."""
    ctx = tls_ctx(f"{pki}/server.crt", f"{pki}/server.key")
    f = fake(pki=pki, tls_ctx=ctx)
    out = kimage.run("pull", f"{f.host}/x/layers:layers",
                     opts=["--certs-dir", certs_for(tmp_path, f.host, f"{pki}/ca.crt")])
    assert out.stdout.split() == [images["layers"].id]
    st = ctx.session_stats()
    requests = len(f.requests)
    assert requests >= 6, f.requests  # manifest, config, 4 layers
    assert st["accept"] < requests, (st, requests)
    if st["accept"] > 1:
        assert st["hits"] >= 1, st
