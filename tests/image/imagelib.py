"""Test images and registries for the image tests.

Builds OCI and Docker images from Debian's busybox-static with the standard
library (tarfile, gzip; the zstd CLI for zstd layers), pushes them to a real
registry (Debian's docker-registry) over the distribution API with
http.client, and runs that registry in three variants: plain HTTP, HTTPS
with a CA generated here (openssl), htpasswd basic auth. Also usable as a
script to push the benchmark image: see bench/image-bench.
"""
import base64
import gzip
import hashlib
import http.client
import io
import json
import os
import shutil
import socket
import ssl
import subprocess
import tarfile
import time
import urllib.parse

from waiting import wait_for

BUSYBOX = "/bin/busybox"
REGISTRY_BIN = "/usr/bin/docker-registry"

MT_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MT_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MT_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MT_OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
MT_LAYER = {
    "gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
    "zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
    "none": "application/vnd.oci.image.layer.v1.tar",
    "docker": "application/vnd.docker.image.rootfs.diff.tar.gzip",
}


# Files the hostile test layers try to create outside the store.
EVIL_CANARIES = ["/tmp/kinglet-evil-traversal", "/tmp/kinglet-evil-symlink",
                 "/tmp/kinglet-evil-symlink-rel"]


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- layers -----------------------------------------------------------------

class Tar:
    """An uncompressed tar built entry by entry (PAX format: xattrs, long names)."""

    def __init__(self):
        self.buf = io.BytesIO()
        self.tar = tarfile.open(fileobj=self.buf, mode="w", format=tarfile.PAX_FORMAT)

    def _info(self, name, type_, mode, uid=0, gid=0, mtime=1700000000, xattrs=None):
        ti = tarfile.TarInfo(name)
        ti.type = type_
        ti.mode = mode
        ti.uid, ti.gid = uid, gid
        ti.mtime = mtime
        if xattrs:
            ti.pax_headers = {"SCHILY.xattr." + k: v for k, v in xattrs.items()}
        return ti

    def dir(self, name, mode=0o755, **kw):
        self.tar.addfile(self._info(name, tarfile.DIRTYPE, mode, **kw))
        return self

    def file(self, name, data=b"", mode=0o644, **kw):
        if isinstance(data, str):
            data = data.encode()
        ti = self._info(name, tarfile.REGTYPE, mode, **kw)
        ti.size = len(data)
        self.tar.addfile(ti, io.BytesIO(data))
        return self

    def bigfile(self, name, size, seed=b"kinglet"):
        """size bytes of pseudo-random (incompressible) data, streamed."""
        ti = self._info(name, tarfile.REGTYPE, 0o644)
        ti.size = size

        class Gen(io.RawIOBase):
            def __init__(self):
                self.left = size
                self.counter = 0

            def readable(self):
                return True

            def readinto(self, b):
                if self.left == 0:
                    return 0
                out = bytearray()
                while len(out) < min(len(b), self.left):
                    out += hashlib.shake_256(seed + self.counter.to_bytes(8, "little")).digest(1 << 16)
                    self.counter += 1
                n = min(len(b), self.left, len(out))
                b[:n] = out[:n]
                self.left -= n
                return n

        self.tar.addfile(ti, io.BufferedReader(Gen(), 1 << 20))
        return self

    def many(self, n, prefix="f"):
        """n empty files, in directories of 1000: no data, only inodes."""
        for i in range(n):
            if i % 1000 == 0:
                self.dir(f"{prefix}{i // 1000}")
            self.file(f"{prefix}{i // 1000}/{i}")
        return self

    def zeros(self, name, size):
        """size zero bytes: compresses to almost nothing (a decompression bomb
        when size is large)."""
        ti = self._info(name, tarfile.REGTYPE, 0o644)
        ti.size = size

        class Zeros(io.RawIOBase):
            def __init__(self):
                self.left = size

            def readable(self):
                return True

            def readinto(self, b):
                n = min(len(b), self.left)
                b[:n] = bytes(n)
                self.left -= n
                return n

        self.tar.addfile(ti, io.BufferedReader(Zeros(), 1 << 20))
        return self

    def sparse(self, name, realsize, data=b"sparse\n"):
        """A PAX 1.0 sparse file: `data` at offset 0, then a hole up to
        realsize bytes (the form GNU tar writes with --sparse)."""
        ti = self._info(f"./GNUSparseFile.0/{name}", tarfile.REGTYPE, 0o644)
        ti.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0",
                          "GNU.sparse.name": name, "GNU.sparse.realsize": str(realsize)}
        smap = f"1\n0\n{len(data)}\n".encode()
        smap += bytes(-len(smap) % 512)
        body = smap + data
        ti.size = len(body)
        self.tar.addfile(ti, io.BytesIO(body))
        return self

    def symlink(self, name, target, **kw):
        ti = self._info(name, tarfile.SYMTYPE, 0o777, **kw)
        ti.linkname = target
        self.tar.addfile(ti)
        return self

    def hardlink(self, name, target, **kw):
        ti = self._info(name, tarfile.LNKTYPE, 0o644, **kw)
        ti.linkname = target
        self.tar.addfile(ti)
        return self

    def fifo(self, name, mode=0o600):
        self.tar.addfile(self._info(name, tarfile.FIFOTYPE, mode))
        return self

    def chardev(self, name, major, minor, mode=0o666):
        ti = self._info(name, tarfile.CHRTYPE, mode)
        ti.devmajor, ti.devminor = major, minor
        self.tar.addfile(ti)
        return self

    def bytes(self):
        self.tar.close()
        return self.buf.getvalue()


def compress(raw, how):
    if how in ("gzip", "docker"):
        return gzip.compress(raw, compresslevel=1, mtime=0)
    if how == "zstd":
        return subprocess.run(["zstd", "-q", "-3", "-c"], input=raw, stdout=subprocess.PIPE,
                              check=True).stdout
    return raw


def gzip_zeros_bomb(size, chunk=64 << 20):
    """A gzip layer whose tar holds one file of `size` zero bytes: a tar
    header, then nothing but zeros, as gzip members of `chunk` zeros each
    (about a thousandth of their size; a 3 GiB file takes 3 MB and a
    second to build). Returns the blob; its diff_id is not computed."""
    ti = tarfile.TarInfo("zero.bin")
    ti.size, ti.mode, ti.mtime = size, 0o644, 1700000000
    header = ti.tobuf(format=tarfile.USTAR_FORMAT)
    total = len(header) + size + (-size % 512) + 1024  # data, padding, end blocks
    full = gzip.compress(bytes(chunk), compresslevel=9, mtime=0)
    out = [gzip.compress(header + bytes(min(chunk, total) - len(header)), compresslevel=9, mtime=0)]
    left = total - min(chunk, total)
    out += [full] * (left // chunk)
    if left % chunk:
        out.append(gzip.compress(bytes(left % chunk), compresslevel=9, mtime=0))
    return b"".join(out)


def zstd_zeros_bomb(size):
    """A zstd layer whose tar holds one file of `size` zero bytes, streamed
    through the zstd CLI (2 GiB take about 65 kB). Returns the blob; its
    diff_id is not computed."""
    ti = tarfile.TarInfo("zero.bin")
    ti.size, ti.mode, ti.mtime = size, 0o644, 1700000000
    header = ti.tobuf(format=tarfile.USTAR_FORMAT)
    z = subprocess.Popen(["zstd", "-q", "-3", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    out = []
    reader = threading.Thread(target=lambda: out.append(z.stdout.read()))
    reader.start()
    z.stdin.write(header)
    left, chunk = size + (-size % 512) + 1024, bytes(8 << 20)
    while left:
        n = min(left, len(chunk))
        z.stdin.write(chunk[:n])
        left -= n
    z.stdin.close()
    reader.join()
    assert z.wait() == 0
    return out[0]


def busybox_layer():
    t = Tar().dir("bin").dir("etc").dir("tmp", mode=0o1777)
    with open(BUSYBOX, "rb") as f:
        t.file("bin/busybox", f.read(), mode=0o755)
    for app in ("sh", "ls", "cat", "echo", "true", "sleep", "id"):
        t.symlink("bin/" + app, "busybox")
    t.file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/sh\n")
    t.file("etc/group", "root:x:0:\nnogroup:x:65534:\n")
    return t.bytes()


# ---- images -------------------------------------------------------------------

class Image:
    """Layers (raw tar, compression), a config; pushed as one manifest."""

    def __init__(self, layers, user="", arch="amd64", os_="linux", docker=False, config=None):
        self.layers = []  # (blob, media type, diff_id)
        for entry in layers:
            if len(entry) == 3:
                # an already compressed blob and the diff_id the config states
                blob, how, diff_id = entry
                self.layers.append((blob, MT_LAYER[how], diff_id))
                continue
            raw, how = entry
            if docker:
                how = "docker" if how != "none" else "none"
            blob = compress(raw, how)
            mt = MT_LAYER[how] if not docker or how == "docker" else \
                "application/vnd.docker.image.rootfs.diff.tar"
            self.layers.append((blob, mt, sha256(raw)))
        self.docker = docker
        self.config = json.dumps({
            "architecture": arch, "os": os_,
            "config": config if config is not None else
            {"User": user, "Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]},
            "rootfs": {"type": "layers", "diff_ids": [d for _, _, d in self.layers]},
        }, sort_keys=True).encode()
        self.config_digest = sha256(self.config)
        self.manifest = json.dumps({
            "schemaVersion": 2,
            "mediaType": MT_DOCKER_MANIFEST if docker else MT_OCI_MANIFEST,
            "config": {"mediaType": MT_DOCKER_CONFIG if docker else MT_OCI_CONFIG,
                       "digest": self.config_digest, "size": len(self.config)},
            "layers": [{"mediaType": mt, "digest": sha256(b), "size": len(b)}
                       for b, mt, _ in self.layers],
        }).encode()
        self.manifest_digest = sha256(self.manifest)
        self.media_type = MT_DOCKER_MANIFEST if docker else MT_OCI_MANIFEST
        self.id = self.config_digest

    def blobs(self):
        return [self.config] + [b for b, _, _ in self.layers]

    def claim_sizes(self, sizes):
        """Rewrites the manifest so that layer i claims sizes[i] bytes (None:
        its real size), as a hostile registry may; returns self."""
        doc = json.loads(self.manifest)
        for d, size in zip(doc["layers"], sizes):
            if size is not None:
                d["size"] = size
        self.manifest = json.dumps(doc).encode()
        self.manifest_digest = sha256(self.manifest)
        return self


def index_of(entries):
    """entries: [(Image, platform dict)] -> (bytes, digest)."""
    doc = json.dumps({
        "schemaVersion": 2, "mediaType": MT_OCI_INDEX,
        "manifests": [{"mediaType": img.media_type, "digest": img.manifest_digest,
                       "size": len(img.manifest), "platform": plat}
                      for img, plat in entries],
    }).encode()
    return doc, sha256(doc)


# ---- registry client (push) ------------------------------------------------------

class Pusher:
    def __init__(self, host, port, tls_ctx=None, basic=None):
        self.host, self.port, self.ctx = host, port, tls_ctx
        self.headers = {}
        if basic:
            self.headers["Authorization"] = "Basic " + base64.b64encode(basic.encode()).decode()

    def _conn(self):
        if self.ctx:
            return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=60)
        return http.client.HTTPConnection(self.host, self.port, timeout=60)

    def request(self, method, path, body=None, headers=None):
        c = self._conn()
        h = dict(self.headers)
        h.update(headers or {})
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, dict(r.getheaders()), data

    def push_blob(self, repo, blob):
        d = sha256(blob)
        st, _, _ = self.request("HEAD", f"/v2/{repo}/blobs/{d}")
        if st == 200:
            return d
        st, hdrs, body = self.request("POST", f"/v2/{repo}/blobs/uploads/")
        assert st == 202, (st, body)
        loc = hdrs.get("Location") or hdrs.get("location")
        u = urllib.parse.urlsplit(loc)
        path = u.path + "?" + (u.query + "&" if u.query else "") + "digest=" + urllib.parse.quote(d)
        st, _, body = self.request("PUT", path, body=blob,
                                   headers={"Content-Type": "application/octet-stream",
                                            "Content-Length": str(len(blob))})
        assert st == 201, (st, body)
        return d

    def push_manifest(self, repo, ref, data, media_type):
        st, _, body = self.request("PUT", f"/v2/{repo}/manifests/{ref}", body=data,
                                   headers={"Content-Type": media_type})
        assert st == 201, (st, body)

    def push_image(self, repo, tag, img):
        for b in img.blobs():
            self.push_blob(repo, b)
        self.push_manifest(repo, tag if tag else img.manifest_digest, img.manifest, img.media_type)


# ---- registry server ---------------------------------------------------------------

def make_ca(workdir):
    """A CA and a server certificate for 127.0.0.1 / localhost."""
    d = os.path.join(workdir, "pki")
    os.makedirs(d, exist_ok=True)
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=kinglet test CA", "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.crt")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", f"{d}/server.key", "-out", f"{d}/server.csr")
    with open(f"{d}/ext.cnf", "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("openssl", "x509", "-req", "-in", f"{d}/server.csr", "-CA", f"{d}/ca.crt",
        "-CAkey", f"{d}/ca.key", "-CAcreateserial", "-days", "2", "-extfile", f"{d}/ext.cnf",
        "-out", f"{d}/server.crt")
    return d


class Registry:
    """docker-registry on 127.0.0.1:<free port>; variant: plain | tls | auth."""

    def __init__(self, workdir, variant="plain", user="kinglet", password="s3cret"):
        self.workdir = workdir
        self.variant = variant
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.user, self.password = user, password
        self.proc = None
        self.pki = None
        os.makedirs(workdir, exist_ok=True)
        cfg = [
            "version: 0.1",
            "log:", "  level: error", "  accesslog:", "    disabled: true",
            "storage:", "  filesystem:", f"    rootdirectory: {workdir}/data",
            "  delete:", "    enabled: true",
            "http:", f"  addr: 127.0.0.1:{self.port}",
        ]
        if variant in ("tls", "auth"):
            self.pki = make_ca(workdir)
            cfg += ["  tls:", f"    certificate: {self.pki}/server.crt",
                    f"    key: {self.pki}/server.key"]
        if variant == "auth":
            with open(f"{workdir}/htpasswd", "w") as f:
                # bcrypt, the only scheme docker-registry's htpasswd takes
                # (python3-bcrypt: the crypt module is deprecated)
                import bcrypt
                f.write(f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt()).decode()}\n")
            cfg += ["auth:", "  htpasswd:", "    realm: kinglet-test",
                    f"    path: {workdir}/htpasswd"]
        self.config = f"{workdir}/config.yml"
        with open(self.config, "w") as f:
            f.write("\n".join(cfg) + "\n")

    def tls_context(self):
        if not self.pki:
            return None
        return ssl.create_default_context(cafile=f"{self.pki}/ca.crt")

    def certs_dir(self):
        """A certs.d tree for kinglet: <dir>/<host:port>/ca.crt."""
        d = os.path.join(self.workdir, "certs.d")
        os.makedirs(os.path.join(d, self.host), exist_ok=True)
        if self.pki:
            shutil.copy(f"{self.pki}/ca.crt", os.path.join(d, self.host, "ca.crt"))
        return d

    def _listens(self):
        """Whether our registry process is the one listening on the port:
        the port was free when chosen, but another test run on the machine
        may have taken it since (and would answer /v2/ for us)."""
        want = f"0100007F:{self.port:04X}"
        inodes = set()
        with open(f"/proc/{self.proc.pid}/net/tcp") as f:
            for line in f.readlines()[1:]:
                c = line.split()
                if c[1] == want and c[3] == "0A":
                    inodes.add(c[9])
        try:
            fds = os.listdir(f"/proc/{self.proc.pid}/fd")
        except OSError:
            return False
        for fd in fds:
            try:
                if os.readlink(f"/proc/{self.proc.pid}/fd/{fd}")[8:-1] in inodes:
                    return True
            except OSError:
                pass
        return False

    def start(self, tries=5):
        env = dict(os.environ)
        env.pop("REGISTRY_HTTP_ADDR", None)
        self.log = open(f"{self.workdir}/registry.log", "wb")
        self.proc = subprocess.Popen([REGISTRY_BIN, "serve", self.config], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)

        def up_or_exited():
            if self.proc.poll() is not None:
                return "exited"
            try:
                if self._listens():
                    st, _, _ = self.pusher().request("GET", "/v2/")
                    if st in (200, 401):
                        return "up"
            except OSError:
                pass
            return None
        if wait_for(up_or_exited, interval=0.05, what="the registry to come up") == "up":
            return self
        log = open(f"{self.workdir}/registry.log").read()
        if "address already in use" in log and tries > 1:
            # taken by another run since it was chosen: another port
            self.log.close()
            self._move_to(free_port())
            return self.start(tries - 1)
        raise RuntimeError("registry exited: " + log)

    def _move_to(self, port):
        old = f"127.0.0.1:{self.port}"
        self.port = port
        self.host = f"127.0.0.1:{port}"
        with open(self.config) as f:
            cfg = f.read()
        with open(self.config, "w") as f:
            f.write(cfg.replace(f"addr: {old}", f"addr: {self.host}"))

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log.close()

    def pusher(self):
        basic = f"{self.user}:{self.password}" if self.variant == "auth" else None
        return Pusher("127.0.0.1", self.port, self.tls_context(), basic)


# ---- a scriptable fake registry (bearer auth, redirects, lies) ----------------------

import http.server
import threading


class FakeRegistry:
    """A small distribution-API server over an in-memory store, for what the
    real registry will not do: bearer tokens from our own token endpoint,
    redirects of blob GETs, blobs whose bytes do not match their digest, and
    counting requests (dedup, mirror tests). Optionally a forwarding mirror of
    an upstream registry (upstream=(host, port))."""

    def __init__(self, bearer=False, creds=None, corrupt=(), redirect=False, upstream=None,
                 fail_status=None, throttle=0.0, flaky=0, basic=False, realm_host="127.0.0.1",
                 redirect_base=None, pki=None, tls_ctx=None, realm_port=None,
                 fail_body=b'{"errors":[]}'):
        """bearer: a token from our /token (on realm_host, the same server
        under another name when it is "localhost"; with creds, only for
        those basic credentials). basic: htpasswd-style basic auth with
        creds. redirect: blob GETs answer 307 to redirect_base (default
        this server as http://127.0.0.1) + /redirected/DIGEST, served
        without auth. pki: a make_ca() directory: serve HTTPS (with its
        server certificate, or as tls_ctx, an ssl.SSLContext, says)."""
        self.blobs, self.manifests = {}, {}
        self.bearer, self.creds = bearer, creds
        self.basic = basic
        self.realm_host = realm_host
        self.realm_port = realm_port  # None: this server's
        self.redirect_base = redirect_base
        self.corrupt = set(corrupt)
        self.redirect = redirect
        self.upstream = upstream
        self.fail_status = fail_status
        self.fail_body = fail_body  # the body of every fail_status answer
        self.throttle = throttle  # seconds of sleep per MiB of blob sent
        self.flaky = flaky  # the first `flaky` blob GETs answer 503
        # a threading.Event: blobs stall after their first MiB until it is set
        self.gate = None
        self.token = "tok-" + hashlib.sha256(os.urandom(8)).hexdigest()[:16]
        self.refresh_token = "refresh-" + hashlib.sha256(os.urandom(8)).hexdigest()[:16]
        self.requests = []
        self.lock = threading.Lock()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, status, body=b"", headers=None):
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                form = urllib.parse.parse_qs(self.rfile.read(n).decode())
                with fake.lock:
                    fake.requests.append(("POST", self.path, dict(self.headers)))
                if self.path.startswith("/token") and \
                        form.get("refresh_token", [""])[0] == fake.refresh_token:
                    return self._send(200, json.dumps({"access_token": fake.token}).encode())
                return self._send(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}')

            def do_HEAD(self):
                self.do_GET()

            def do_GET(self):
                with fake.lock:
                    fake.requests.append(("GET", self.path, dict(self.headers)))
                # absolute-form targets come from clients using us as a proxy
                path = urllib.parse.urlsplit(self.path).path
                if "/blobs/" in path:
                    with fake.lock:
                        flaky = fake.flaky > 0
                        fake.flaky -= 1 if flaky else 0
                    if flaky:
                        return self._send(503, b'{"errors":[{"code":"UNAVAILABLE"}]}')
                if path.startswith("/token"):
                    if fake.creds:
                        want = "Basic " + base64.b64encode(fake.creds.encode()).decode()
                        if self.headers.get("Authorization") != want:
                            return self._send(401, b"{}")
                    return self._send(200, json.dumps({"token": fake.token}).encode())
                if fake.fail_status:
                    return self._send(fake.fail_status, fake.fail_body)
                if fake.basic and not path.startswith("/redirected/"):
                    want = "Basic " + base64.b64encode(fake.creds.encode()).decode()
                    if self.headers.get("Authorization") != want:
                        return self._send(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', {
                            "WWW-Authenticate": 'Basic realm="fake"'})
                if fake.bearer and self.headers.get("Authorization") != "Bearer " + fake.token \
                        and not path.startswith("/redirected/"):
                    realm = f"http://{fake.realm_host}:{fake.realm_port or fake.port}/token"
                    return self._send(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', {
                        "WWW-Authenticate":
                            f'Bearer realm="{realm}",service="fake",scope="repository:x:pull"'})
                if fake.upstream:
                    return self._forward()
                parts = path.split("/")
                if path.startswith("/redirected/"):
                    d = parts[2]
                    return self._blob(d)
                if len(parts) >= 5 and parts[1] == "v2" and parts[-2] == "manifests":
                    m = fake.manifests.get(parts[-1])
                    if not m:
                        return self._send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN",'
                                          b'"message":"manifest unknown","detail":{}}]}')
                    return self._send(200, m[0], {"Content-Type": m[1],
                                                  "Docker-Content-Digest": sha256(m[0])})
                if len(parts) >= 5 and parts[1] == "v2" and parts[-2] == "blobs":
                    d = parts[-1]
                    if fake.redirect and d in fake.blobs:
                        base = fake.redirect_base or f"http://127.0.0.1:{fake.port}"
                        return self._send(307, b"", {"Location": f"{base}/redirected/{d}"})
                    return self._blob(d)
                if path == "/v2/":
                    return self._send(200, b"{}")
                return self._send(404, b"{}")

            def _blob(self, d):
                b = fake.blobs.get(d)
                if b is None:
                    return self._send(404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}')
                if d in fake.corrupt:
                    b = bytearray(b)
                    b[len(b) // 2] ^= 0xFF
                    b = bytes(b)
                if not fake.throttle and fake.gate is None:
                    return self._send(200, b, {"Content-Type": "application/octet-stream"})
                self.send_response(200)
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                try:
                    for off in range(0, len(b), 1 << 20):
                        if off and fake.gate is not None:
                            fake.gate.wait()
                        self.wfile.write(b[off:off + (1 << 20)])
                        time.sleep(fake.throttle)  # a slow registry's pace, not a wait
                except OSError:
                    pass

            def _forward(self):
                c = http.client.HTTPConnection(*fake.upstream, timeout=60)
                u = urllib.parse.urlsplit(self.path)
                target = u.path + ("?" + u.query if u.query else "")
                c.request(self.command, target, headers={
                    k: v for k, v in self.headers.items() if k.lower() in ("accept", "authorization")})
                r = c.getresponse()
                body = r.read()
                hdrs = {k: v for k, v in r.getheaders()
                        if k.lower() in ("content-type", "docker-content-digest", "www-authenticate",
                                         "location")}
                c.close()
                return self._send(r.status, body, hdrs)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if pki:
            ctx = tls_ctx
            if ctx is None:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                ctx.load_cert_chain(f"{pki}/server.crt", f"{pki}/server.key")
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.pki = pki
        self.port = self.server.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add_image(self, tag, img):
        for b in img.blobs():
            self.blobs[sha256(b)] = b
        self.manifests[tag] = (img.manifest, img.media_type)
        self.manifests[img.manifest_digest] = (img.manifest, img.media_type)

    def certs_dir(self, workdir):
        """A certs.d tree trusting this server's CA."""
        d = os.path.join(workdir, "certs.d")
        os.makedirs(os.path.join(d, self.host), exist_ok=True)
        shutil.copy(f"{self.pki}/ca.crt", os.path.join(d, self.host, "ca.crt"))
        return d

    def got(self, prefix):
        """(method, path, headers) of the requests whose path starts with prefix."""
        with self.lock:
            return [r for r in self.requests if r[1].startswith(prefix)]

    def blob_gets(self):
        with self.lock:
            return [p for m, p, _ in self.requests if m == "GET" and "/blobs/sha256:" in p]

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        if self.gate is not None:
            self.gate.set()
        self.server.shutdown()
        self.server.server_close()
