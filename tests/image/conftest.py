"""Fixtures for the image tests: a real registry with the project's own test
images, and a helper to run `kinglet image` on a private store."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import imagelib  # noqa: E402
from imagelib import Image, Tar, busybox_layer, index_of  # noqa: E402


def _need(path, pkg):
    if not os.path.exists(path):
        pytest.skip(f"{path} missing: install the Debian package {pkg} (scripts/install-deps test)")


@pytest.fixture(scope="session")
def images():
    """The test images, built once per session."""
    _need(imagelib.BUSYBOX, "busybox-static")
    bb = busybox_layer()
    imgs = {}
    imgs["busybox"] = Image([(bb, "gzip")], docker=True)

    l1 = (Tar().dir("a", mode=0o750, uid=1234, gid=4321, mtime=1600000000)
          .file("a/f1", "one\n", mode=0o640, uid=1234, gid=4321, mtime=1500000000)
          .file("a/f2", "two\n")
          .hardlink("a/hl", "a/f1")
          .symlink("a/sl", "f1", uid=1234, gid=4321)
          .fifo("a/fifo", mode=0o620)
          .chardev("a/null", 1, 3)
          .file("a/suid", "#!/bin/sh\n", mode=0o4755)
          .file("a/capped", "x", mode=0o755,
                xattrs={"security.capability": "\x01\x00\x00\x02\x00\x04\x00\x00" + "\x00" * 12,
                        "user.kinglet": "hello"})
          .dir("opq").file("opq/old", "old").dir("gone").file("gone/x", "x")
          .bytes())
    l2 = (Tar().dir("a").file("a/.wh.f2").dir("opq").file("opq/.wh..wh..opq")
          .file("opq/new", "new").file(".wh.gone").bytes())
    # a directory whited out later in its own layer (replaced by the whiteout)
    l3 = (Tar().file("plain.txt", "uncompressed layer\n").dir("w").file("w/f", "x")
          .file(".wh.w").bytes())
    imgs["layers"] = Image([(bb, "gzip"), (l1, "gzip"), (l2, "zstd"), (l3, "none")], user="1000")

    amd = Image([(bb, "gzip")], user="multi-amd64")
    arm64 = Image([(Tar().file("arch", "arm64").bytes(), "gzip")], arch="arm64")
    armv7 = Image([(Tar().file("arch", "armv7").bytes(), "gzip")], arch="arm")
    imgs["multi-amd64"], imgs["multi-arm64"], imgs["multi-armv7"] = amd, arm64, armv7
    imgs["multi-index"] = index_of([
        (arm64, {"os": "linux", "architecture": "arm64", "variant": "v8"}),
        (amd, {"os": "linux", "architecture": "amd64"}),
        (armv7, {"os": "linux", "architecture": "arm", "variant": "v7"}),
    ])
    imgs["armonly-index"] = index_of([
        (arm64, {"os": "linux", "architecture": "arm64"}),
        (armv7, {"os": "linux", "architecture": "arm", "variant": "v7"}),
    ])
    # two images sharing the busybox layer
    imgs["shared1"] = Image([(bb, "gzip"), (Tar().file("one", "1").bytes(), "gzip")])
    imgs["shared2"] = Image([(bb, "gzip"), (Tar().file("two", "2").bytes(), "gzip")])

    # hostile layers: every one must fail and write nothing outside
    imgs["evil-traversal"] = Image([(Tar().file("../../../../../tmp/kinglet-evil-traversal", "x")
                                     .bytes(), "gzip")])
    imgs["evil-symlink"] = Image([(Tar().symlink("esc", "/tmp").file(
        "esc/kinglet-evil-symlink", "x").bytes(), "gzip")])
    imgs["evil-symlink-rel"] = Image([(Tar().symlink("up", "../../../../../../../../tmp").file(
        "up/kinglet-evil-symlink-rel", "x").bytes(), "gzip")])
    imgs["evil-hardlink"] = Image([(Tar().hardlink("hl", "../../../../../../etc/passwd")
                                    .bytes(), "gzip")])
    imgs["evil-hardlink-abs"] = Image([(Tar().hardlink("hl", "/etc/hostname").bytes(), "gzip")])
    imgs["evil-symlink-then-hardlink"] = Image([(Tar().symlink("esc", "/etc").hardlink(
        "hl", "esc/hostname").bytes(), "gzip")])
    # 96 MiB of zeros in a ~10 kB zstd layer: a decompression bomb in miniature
    imgs["bomb"] = Image([(Tar().zeros("zero.bin", 96 << 20).bytes(), "zstd")])
    # a file claiming 1 TiB, nearly all of it a hole
    imgs["sparse"] = Image([(Tar().sparse("huge.img", 1 << 40).bytes(), "gzip")])
    # 12000 empty files: no bytes to speak of, but 12000 inodes
    imgs["many"] = Image([(Tar().many(12000).bytes(), "gzip")])
    return imgs


@pytest.fixture(scope="session")
def registry(tmp_path_factory, images):
    """Plain-HTTP docker-registry with every test image pushed."""
    _need(imagelib.REGISTRY_BIN, "docker-registry")
    reg = imagelib.Registry(str(tmp_path_factory.mktemp("registry")), "plain").start()
    p = reg.pusher()
    p.push_image("busybox", "latest", images["busybox"])
    p.push_image("busybox", "other", images["busybox"])
    p.push_image("layers", "latest", images["layers"])
    for k in ("multi-amd64", "multi-arm64", "multi-armv7"):
        p.push_image("multi", None, images[k])
        p.push_image("armonly", None, images[k])
    doc, _ = images["multi-index"]
    p.push_manifest("multi", "latest", doc, imagelib.MT_OCI_INDEX)
    doc, _ = images["armonly-index"]
    p.push_manifest("armonly", "latest", doc, imagelib.MT_OCI_INDEX)
    p.push_image("shared", "v1", images["shared1"])
    p.push_image("shared", "v2", images["shared2"])
    p.push_image("bomb", "latest", images["bomb"])
    p.push_image("sparse", "latest", images["sparse"])
    p.push_image("many", "latest", images["many"])
    for k in images:
        if k.startswith("evil-"):
            p.push_image(k, "latest", images[k])
    yield reg
    reg.stop()


class Kinglet:
    """Runs `kinglet image` on a private root."""

    def __init__(self, binary, root, registry=None):
        self.binary, self.root = binary, str(root)
        self.opts = []
        if registry is not None:
            self.opts += ["--insecure-registry", registry.host]

    def run(self, *args, check=True, timeout=300, opts=None):
        cmd = [self.binary, "image", "--root", self.root] + \
            (self.opts if opts is None else opts) + list(args)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"{cmd} failed ({p.returncode}): {p.stderr}")
        return p

    def popen(self, *args, opts=None):
        cmd = [self.binary, "image", "--root", self.root] + \
            (self.opts if opts is None else opts) + list(args)
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ls(self):
        return json.loads(self.run("ls", "--json").stdout)

    def inspect(self, ref):
        return json.loads(self.run("inspect", ref).stdout)

    def store(self):
        return pathlib.Path(self.root) / "image"

    def snapshots(self):
        d = self.store() / "snapshots"
        return sorted(p.name for p in d.iterdir()) if d.exists() else []

    def tmp_entries(self):
        d = self.store() / "tmp"
        return sorted(p.name for p in d.iterdir()) if d.exists() else []


@pytest.fixture
def fake(images):
    """Factory of scriptable fake registries serving some test images."""
    regs = []

    def make(**kw):
        f = imagelib.FakeRegistry(**kw)
        for tag in ("busybox", "layers", "shared1", "shared2"):
            f.add_image(tag, images[tag])
        regs.append(f.start())
        return f
    yield make
    for f in regs:
        f.stop()


@pytest.fixture
def kimage(kinglet_bin, tmp_path, registry):
    k = Kinglet(kinglet_bin, tmp_path / "root", registry)
    yield k
    shutil.rmtree(tmp_path / "root", ignore_errors=True)


# The daemon fixtures of tests/cri (Daemon, daemon_factory, cri stubs), for the
# ImageService tests; loaded under another module name.
def _load_cri_fixtures():
    import importlib.util
    path = pathlib.Path(__file__).resolve().parent.parent / "cri" / "conftest.py"
    spec = importlib.util.spec_from_file_location("cri_conftest", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["cri_conftest"] = mod
    spec.loader.exec_module(mod)
    return mod


_cri_conftest = _load_cri_fixtures()
cri = _cri_conftest.cri
daemon_factory = _cri_conftest.daemon_factory
