"""Transport and authentication: HTTPS with a generated CA, htpasswd basic
auth (both with Debian's docker-registry), bearer tokens, redirects, lying
registries, mirrors with fallback and download dedup (a scriptable fake
registry in imagelib)."""
import base64
import os

import pytest

import imagelib
from imagelib import FakeRegistry


@pytest.fixture(scope="module")
def tls_registry(tmp_path_factory, images):
    reg = imagelib.Registry(str(tmp_path_factory.mktemp("tlsreg")), "tls").start()
    reg.pusher().push_image("busybox", "latest", images["busybox"])
    yield reg
    reg.stop()


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory, images):
    reg = imagelib.Registry(str(tmp_path_factory.mktemp("authreg")), "auth").start()
    reg.pusher().push_image("busybox", "latest", images["busybox"])
    yield reg
    reg.stop()


def test_https_with_ca(kimage, tls_registry, images):
    ref = f"{tls_registry.host}/busybox:latest"
    p = kimage.run("pull", ref, check=False, opts=[])
    assert p.returncode == 1 and "certificate" in p.stderr.lower(), p.stderr
    out = kimage.run("pull", ref, opts=["--certs-dir", tls_registry.certs_dir()]).stdout.split()
    assert out == [images["busybox"].id]
    kimage.run("rm", ref)
    # insecure: no verification at all
    out = kimage.run("pull", ref, opts=["--insecure-registry", tls_registry.host]).stdout.split()
    assert out == [images["busybox"].id]


def test_plain_http_needs_insecure(kimage, registry):
    p = kimage.run("pull", f"{registry.host}/busybox:latest", check=False, opts=[])
    assert p.returncode == 1
    # without --insecure-registry only https is tried: a TLS handshake with
    # a plain-HTTP server fails
    assert f"GET https://{registry.host}/v2/busybox/manifests/latest: " in p.stderr, p.stderr
    assert "SSL" in p.stderr and "http://" not in p.stderr, p.stderr
    assert kimage.ls() == []


def test_basic_auth(kimage, auth_registry, images):
    ref = f"{auth_registry.host}/busybox:latest"
    opts = ["--certs-dir", auth_registry.certs_dir()]
    p = kimage.run("pull", ref, check=False, opts=opts)
    assert p.returncode == 1 and "requires credentials" in p.stderr, p.stderr
    p = kimage.run("pull", "--creds", "kinglet:wrong", ref, check=False, opts=opts)
    assert p.returncode == 1 and "401" in p.stderr, p.stderr
    assert "wrong" not in p.stderr, "credentials never appear in messages"
    out = kimage.run("pull", "--creds", "kinglet:s3cret", ref, opts=opts).stdout.split()
    assert out == [images["busybox"].id]
    kimage.run("rm", ref)
    b64 = base64.b64encode(b"kinglet:s3cret").decode()
    out = kimage.run("pull", "--auth", b64, ref, opts=opts).stdout.split()
    assert out == [images["busybox"].id]


def _auth_of(reqs):
    return [h.get("Authorization") for _, _, h in reqs]


def test_credentials_from_a_file_or_stdin(kimage, fake, images, tmp_path):
    """Credentials that never show in ps: --creds USER with the password
    alone on stdin (docker login's --password-stdin), or USER:PASSWORD
    from --creds-file; a password on the command line works with a
    warning. Bad uses fail with usage errors, before any request."""
    import subprocess
    f = fake(basic=True, creds="alice:pw 2")
    ref = f"{f.host}/x/busybox:busybox"
    opts = ["--insecure-registry", f.host]
    want = "Basic " + base64.b64encode(b"alice:pw 2").decode()
    cmd = [kimage.binary, "image", "--root", kimage.root] + opts + ["pull"]
    p = subprocess.run(cmd + ["--creds", "alice", "--password-stdin", ref], input="pw 2\n",
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.split() == [images["busybox"].id], p.stderr
    assert "warning" not in p.stderr, p.stderr
    assert want in _auth_of(f.got("/v2/"))
    kimage.run("rm", ref)
    f.requests.clear()
    creds = tmp_path / "creds"
    creds.write_text("alice:pw 2\n")
    creds.chmod(0o600)
    p = kimage.run("pull", "--creds-file", str(creds), ref, opts=opts)
    assert p.stdout.split() == [images["busybox"].id] and "warning" not in p.stderr, p.stderr
    assert want in _auth_of(f.got("/v2/"))
    kimage.run("rm", ref)
    p = kimage.run("pull", "--creds", "alice:pw 2", ref, opts=opts)
    assert "warning: a password given with --creds shows in ps" in p.stderr, p.stderr
    f.requests.clear()
    # a password twice, no user for stdin, a file without a password
    creds.write_text("alice\n")
    for bad, why in [(["--creds", "alice:x", "--password-stdin"], "--password-stdin wants"),
                     (["--password-stdin"], "--password-stdin wants"),
                     (["--creds-file", str(creds)], "no USER:PASSWORD line"),
                     (["--creds-file", str(tmp_path / "none")], "No such file")]:
        p = subprocess.run(cmd + bad + [ref], input="pw\n", capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 2 and why in p.stderr, (bad, p.stderr)
    assert f.requests == []


@pytest.mark.parametrize("opt,value,field", [
    ("--registry-token", "tok\r\nX-Smuggled: 1", "registry_token"),
    ("--auth", "YWxpY2U6cHc=\r\n\r\nGET /smuggled HTTP/1.1", "auth"),
    ("--identity-token", "id\ntok", "identity_token"),
    ("--creds", "alice\r\nX: 1:pw", "username"),
])
def test_control_bytes_in_credentials_are_refused(kimage, fake, opt, value, field):
    """A CR or LF in a credential would write headers or a second request
    of the caller's making: refused, naming the field and not its value,
    before any request reaches the registry."""
    f = fake(bearer=True)
    ref = f"{f.host}/x/busybox:busybox"
    p = kimage.run("pull", opt, value, ref, check=False, opts=["--insecure-registry", f.host])
    assert p.returncode == 1, p.stdout
    assert f"the credentials' {field} holds a control character" in p.stderr, p.stderr
    assert "X: 1" not in p.stderr and "Smuggled" not in p.stderr and "smuggled" not in p.stderr
    assert f.requests == []


def test_bearer_anonymous_and_redirect(kimage, fake, images):
    """An anonymous bearer token, and blob GETs redirected to another host
    (localhost, the same server under another name, as blob storage would
    be): the token goes to the registry's blob URLs, never along the
    redirect."""
    f = fake(bearer=True, redirect=True)
    f.redirect_base = f"http://localhost:{f.port}"
    out = kimage.run("pull", f"{f.host}/x/busybox:busybox",
                     opts=["--insecure-registry", f.host]).stdout.split()
    assert out == [images["busybox"].id]
    token_gets = [p for m, p, _ in f.requests if p.startswith("/token")]
    assert token_gets and "scope=repository%3Ax%3Apull" in token_gets[0]
    blobs = [r for r in f.got("/v2/x/busybox/blobs/") if r[2].get("Authorization")]
    assert blobs and set(_auth_of(blobs)) == {"Bearer " + f.token}
    redirected = f.got("/redirected/")
    assert redirected, f.requests
    for _, path, hdrs in redirected:
        assert hdrs.get("Host") == f"localhost:{f.port}", hdrs
        assert "Authorization" not in hdrs, f"the bearer token followed the redirect to {path}"


@pytest.mark.parametrize("target", ["other-host", "same-origin"])
@pytest.mark.parametrize("auth", ["basic", "bearer", "registry-token"])
def test_credentials_stay_with_their_origin(kimage, fake, images, auth, target):
    """Basic credentials, a bearer token from the realm and a registry
    token given as is: each goes to the registry's URLs and along a
    redirect to the same scheme, host and port, never to another host
    (which only ever sees requests without an Authorization header)."""
    if auth == "basic":
        f = fake(basic=True, creds="alice:pw", redirect=True)
        args = ["--creds", "alice:pw"]
        want = "Basic " + base64.b64encode(b"alice:pw").decode()
    else:
        f = fake(bearer=True, creds="alice:pw", redirect=True)
        args = ["--creds", "alice:pw"] if auth == "bearer" else ["--registry-token", f.token]
        want = "Bearer " + f.token
    host = "localhost" if target == "other-host" else "127.0.0.1"
    f.redirect_base = f"http://{host}:{f.port}"
    out = kimage.run("pull", *args, f"{f.host}/x/busybox:busybox",
                     opts=["--insecure-registry", f.host]).stdout.split()
    assert out == [images["busybox"].id]
    assert want in _auth_of(f.got("/v2/x/busybox/blobs/")), "credentials were in use"
    redirected = f.got("/redirected/")
    assert redirected
    for _, _, hdrs in redirected:
        assert hdrs.get("Host") == f"{host}:{f.port}", hdrs
        if target == "other-host":
            assert "Authorization" not in hdrs, hdrs
        else:
            assert hdrs.get("Authorization") == want, hdrs


@pytest.mark.parametrize("status,body,want", [
    (404, b"<html><body>Not Found on 10.1.2.3 (token=hunter2)\x1b[2J</body></html>",
     "GET URL: (HTTP 404)"),
    (403, b"secret-page-" + b"x" * 200, "GET URL: (HTTP 403)"),
    (403, b'{"errors":[{"code":"DENIED","message":"no\\u001b[31m\\u0007"}],'
          b'"hint":"secret-page"}', "GET URL: DENIED: no\\x1b[31m\\x07 (HTTP 403)"),
])
def test_error_bodies_are_not_echoed(kimage, fake, status, body, want):
    """A registry's error answer reaches the caller only as the code and
    message of its JSON error document, control bytes escaped; any other
    body (an HTML page, a proxy's text) is never echoed."""
    f = fake(fail_status=status, fail_body=body)
    ref = f"{f.host}/x/busybox:busybox"
    p = kimage.run("pull", ref, check=False, opts=["--insecure-registry", f.host])
    assert p.returncode == 1, p.stdout
    url = f"http://{f.host}/v2/x/busybox/manifests/busybox"
    assert p.stderr.rstrip().endswith(want.replace("URL", url)), p.stderr
    for leak in ("10.1.2.3", "hunter2", "html", "secret-page", "\x1b", "\x07"):
        assert leak not in p.stderr, p.stderr


def test_world_readable_client_key_is_warned_about(kimage, fake, images, tmp_path):
    """A client.key (mTLS) that every user can read is still used, as
    docker and containerd use it, but with a warning naming it; a 0600 one
    gets none."""
    import shutil
    pki = imagelib.make_ca(str(tmp_path))
    f = fake(pki=pki)
    certs = f.certs_dir(str(tmp_path))
    key = os.path.join(certs, f.host, "client.key")
    shutil.copy(f"{pki}/server.crt", os.path.join(certs, f.host, "client.cert"))
    shutil.copy(f"{pki}/server.key", key)
    ref = f"{f.host}/x/busybox:busybox"
    os.chmod(key, 0o644)
    p = kimage.run("pull", ref, opts=["--certs-dir", certs])
    assert p.stdout.split() == [images["busybox"].id]
    assert f"the registry client key `{key}` is readable by every user (mode 0644)" in p.stderr, \
        p.stderr
    kimage.run("rm", ref)
    os.chmod(key, 0o600)
    p = kimage.run("pull", ref, opts=["--certs-dir", certs])
    assert p.stdout.split() == [images["busybox"].id]
    assert "client key" not in p.stderr, p.stderr


def test_https_redirect_to_plain_http_refused(kimage, fake, images, tmp_path):
    """A verified HTTPS registry redirecting a blob to plain HTTP fails the
    pull, before any request goes out in clear; a registry configured as
    insecure may do it."""
    plain = fake()
    f = fake(pki=imagelib.make_ca(str(tmp_path)), redirect=True,
             redirect_base=f"http://{plain.host}")
    ref = f"{f.host}/x/busybox:busybox"
    p = kimage.run("pull", ref, check=False, opts=["--certs-dir", f.certs_dir(str(tmp_path))])
    assert p.returncode == 1
    assert f"redirect from https to plain http ({plain.host.split(':')[0]}) refused" in p.stderr, \
        p.stderr
    assert f.got("/v2/x/busybox/blobs/"), "the redirect was met"
    assert plain.got("/redirected/") == [], "nothing went out in clear"
    assert kimage.ls() == [] and kimage.snapshots() == [] and kimage.tmp_entries() == []
    out = kimage.run("pull", ref, opts=["--insecure-registry", f.host]).stdout.split()
    assert out == [images["busybox"].id]
    assert plain.got("/redirected/")


def test_token_realm_on_another_host_gets_no_credentials(kimage, fake):
    """A challenge naming a token realm on another host than the registry
    gets neither the registry's basic credentials nor its identity token:
    the token is asked for anonymously, and when that is refused the error
    says why."""
    f = fake(bearer=True, creds="alice:pw", realm_host="localhost")
    ref = f"{f.host}/x/busybox:busybox"
    opts = ["--insecure-registry", f.host]
    p = kimage.run("pull", "--creds", "alice:pw", ref, check=False, opts=opts)
    assert p.returncode == 1
    assert "credentials not sent to the token realm on another host" in p.stderr, p.stderr
    tokens = f.got("/token")
    assert tokens and all(h.get("Host") == f"localhost:{f.port}" for _, _, h in tokens)
    assert _auth_of(tokens) == [None] * len(tokens), tokens
    f.requests.clear()
    p = kimage.run("pull", "--identity-token", f.refresh_token, ref, check=False, opts=opts)
    assert p.returncode == 1 and "credentials not sent" in p.stderr, p.stderr
    assert not any(m == "POST" for m, _, _ in f.requests), "the identity token stayed home"
    assert f.got("/token")
    assert kimage.ls() == []


def test_token_realm_on_another_port_gets_no_credentials(kimage, fake, images):
    """A realm on the registry's host but another port (any local user may
    listen there) gets no basic credentials: the token is asked for
    anonymously; the same realm on the registry's own port gets them."""
    tok = fake(bearer=True)
    f = fake(bearer=True, creds="alice:pw", realm_port=tok.port)
    ref = f"{f.host}/x/busybox:busybox"
    opts = ["--insecure-registry", f.host]
    p = kimage.run("pull", "--creds", "alice:pw", ref, check=False, opts=opts)
    assert p.returncode == 1
    assert "credentials were not sent to the registry's token realm on another host or port" \
        in p.stderr, p.stderr
    tokens = tok.got("/token")
    assert tokens and _auth_of(tokens) == [None] * len(tokens), tokens
    f.realm_port = None
    out = kimage.run("pull", "--creds", "alice:pw", ref, opts=opts).stdout.split()
    assert out == [images["busybox"].id]
    assert "Basic " + base64.b64encode(b"alice:pw").decode() in _auth_of(f.got("/token"))


def test_bearer_with_credentials(kimage, fake, images):
    f = fake(bearer=True, creds="alice:pw")
    ref = f"{f.host}/x/busybox:busybox"
    opts = ["--insecure-registry", f.host]
    p = kimage.run("pull", ref, check=False, opts=opts)
    assert p.returncode == 1 and "token request" in p.stderr, p.stderr
    out = kimage.run("pull", "--creds", "alice:pw", ref, opts=opts).stdout.split()
    assert out == [images["busybox"].id]
    # the realm is the registry's own host: the credentials went there
    assert "Basic " + base64.b64encode(b"alice:pw").decode() in _auth_of(f.got("/token"))


def test_missing_manifest_reports_registry_error(kimage, fake):
    f = fake()
    p = kimage.run("pull", f"{f.host}/x/busybox:nosuch", check=False,
                   opts=["--insecure-registry", f.host])
    assert p.returncode == 1
    assert p.stderr.rstrip().endswith("MANIFEST_UNKNOWN: manifest unknown (HTTP 404)"), p.stderr
    assert "No such file" not in p.stderr and "{" not in p.stderr, p.stderr


def test_manifest_digest_mismatch(kimage, fake, images):
    """A manifest whose bytes are not those of the digest asked for: by
    digest at the top, and as an index entry."""
    f = fake()
    bb, other = images["busybox"], images["shared1"]
    opts = ["--insecure-registry", f.host]
    f.manifests[bb.manifest_digest] = (other.manifest, other.media_type)
    p = kimage.run("pull", f"{f.host}/x/busybox@{bb.manifest_digest}", check=False, opts=opts)
    assert p.returncode == 1
    assert (f"manifest digest mismatch: got {other.manifest_digest}, "
            f"expected {bb.manifest_digest}") in p.stderr, p.stderr
    doc, _ = imagelib.index_of([(bb, {"os": "linux", "architecture": "amd64"})])
    f.manifests["idx"] = (doc, imagelib.MT_OCI_INDEX)
    p = kimage.run("pull", f"{f.host}/x/busybox:idx", check=False, opts=opts)
    assert p.returncode == 1
    assert f"manifest digest mismatch: got {other.manifest_digest}" in p.stderr, p.stderr
    assert kimage.ls() == [] and kimage.snapshots() == [] and kimage.tmp_entries() == []


def test_config_digest_mismatch(kimage, fake, images):
    img = images["busybox"]
    f = fake(corrupt=[img.config_digest])
    p = kimage.run("pull", f"{f.host}/x/busybox:busybox", check=False,
                   opts=["--insecure-registry", f.host])
    assert p.returncode == 1
    assert "image config digest mismatch" in p.stderr and img.config_digest in p.stderr, p.stderr
    assert kimage.ls() == [] and kimage.snapshots() == [] and kimage.tmp_entries() == []


def test_identity_and_registry_tokens(kimage, fake, images):
    f = fake(bearer=True, creds="nobody:never")
    ref = f"{f.host}/x/busybox:busybox"
    opts = ["--insecure-registry", f.host]
    out = kimage.run("pull", "--identity-token", f.refresh_token, ref, opts=opts).stdout.split()
    assert out == [images["busybox"].id]
    assert any(m == "POST" and p.startswith("/token") for m, p, _ in f.requests)
    kimage.run("rm", ref)
    f.requests.clear()
    out = kimage.run("pull", "--registry-token", f.token, ref, opts=opts).stdout.split()
    assert out == [images["busybox"].id]
    assert not any(p.startswith("/token") for _, p, _ in f.requests)


@pytest.mark.parametrize("layer,why", [(3, "digest mismatch"), (1, "corrupt gzip stream")])
def test_lying_registry(kimage, fake, images, layer, why):
    """A blob whose bytes are not what its digest says (an uncompressed one:
    the digest check catches it; a gzip one: usually inflate does first)."""
    img = images["layers"]
    bad = imagelib.sha256(img.layers[layer][0])
    f = fake(corrupt=[bad])
    p = kimage.run("pull", f"{f.host}/x/layers:layers", check=False,
                   opts=["--insecure-registry", f.host])
    assert p.returncode == 1 and (why in p.stderr or "digest mismatch" in p.stderr), p.stderr
    assert kimage.ls() == [] and kimage.snapshots() == [] and kimage.tmp_entries() == []


def test_mirror_first_then_origin(kimage, registry, fake, images):
    dead = imagelib.free_port()
    ref = f"{registry.host}/busybox:latest"
    # a dead mirror: fall back to the origin
    out = kimage.run("pull", ref, opts=["--insecure-registry", registry.host,
                                        "--registry-mirror", f"{registry.host}=http://127.0.0.1:{dead}"]
                     ).stdout.split()
    assert out == [images["busybox"].id]
    kimage.run("rm", ref)
    # mirrors only: the dead mirror fails the pull
    p = kimage.run("pull", ref, check=False, opts=[
        "--insecure-registry", registry.host, "--no-origin-fallback",
        "--registry-mirror", f"{registry.host}=http://127.0.0.1:{dead}"])
    assert p.returncode == 1
    assert f"GET http://127.0.0.1:{dead}/v2/busybox/manifests/latest: Failed to connect" \
        in p.stderr, p.stderr
    assert f"https://{registry.host}" not in p.stderr, "the origin was not tried"
    # a working mirror serves an unreachable origin
    m = fake(upstream=("127.0.0.1", registry.port))
    out = kimage.run("pull", "unreachable.invalid/busybox:latest",
                     opts=["--registry-mirror", f"unreachable.invalid=http://{m.host}"]).stdout.split()
    assert out == [images["busybox"].id]
    assert m.blob_gets()
    (rec,) = kimage.ls()
    assert rec["repo_tags"] == ["unreachable.invalid/busybox:latest"]


def test_concurrent_pulls_download_each_blob_once(kimage, fake, images):
    f = fake()
    opts = ["--insecure-registry", f.host]
    out = kimage.run("pull", f"{f.host}/x/y:shared1", f"{f.host}/x/y:shared2",
                     f"{f.host}/x/y:shared1", opts=opts).stdout.split()
    assert sorted(set(out)) == sorted({images["shared1"].id, images["shared2"].id})
    gets = f.blob_gets()
    shared = imagelib.sha256(images["shared1"].layers[0][0])
    assert sum(1 for p in gets if p.endswith(shared)) == 1, gets
    assert len(kimage.snapshots()) == 3


def test_retries_transient_failures(kimage, fake, images):
    f = fake(flaky=2)
    out = kimage.run("pull", f"{f.host}/x/busybox:busybox",
                     opts=["--insecure-registry", f.host]).stdout.split()
    assert out == [images["busybox"].id]
    assert f.flaky == 0, "both 503s were served"


def test_proxy_from_environment(kimage, registry, fake, images):
    """http_proxy from the environment carries the pull (libcurl's rules);
    the registry host itself is unreachable without it."""
    import subprocess
    proxy = fake(upstream=("127.0.0.1", registry.port))
    env = dict(os.environ, http_proxy=f"http://{proxy.host}", no_proxy="")
    env.pop("NO_PROXY", None)
    p = subprocess.run([kimage.binary, "image", "--root", kimage.root,
                        "--insecure-registry", "registry.invalid:5000", "pull",
                        "registry.invalid:5000/busybox:latest"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [images["busybox"].id]
    assert any(path.startswith("http://registry.invalid:5000/v2/")
               for _, path, _ in proxy.requests)
