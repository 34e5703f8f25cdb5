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


def test_bearer_anonymous_and_redirect(kimage, fake, images):
    f = fake(bearer=True, redirect=True)
    out = kimage.run("pull", f"{f.host}/x/busybox:busybox",
                     opts=["--insecure-registry", f.host]).stdout.split()
    assert out == [images["busybox"].id]
    token_gets = [p for m, p, _ in f.requests if p.startswith("/token")]
    assert token_gets and "scope=repository%3Ax%3Apull" in token_gets[0]
    assert any(p.startswith("/redirected/") for m, p, _ in f.requests)
    # the bearer token never follows the redirect (same host here, but a
    # fresh request without our header is what blob storage sees)
    assert f.blob_gets()


def test_bearer_with_credentials(kimage, fake, images):
    f = fake(bearer=True, creds="alice:pw")
    ref = f"{f.host}/x/busybox:busybox"
    opts = ["--insecure-registry", f.host]
    p = kimage.run("pull", ref, check=False, opts=opts)
    assert p.returncode == 1 and "token request" in p.stderr, p.stderr
    out = kimage.run("pull", "--creds", "alice:pw", ref, opts=opts).stdout.split()
    assert out == [images["busybox"].id]


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
