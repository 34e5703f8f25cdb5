"""`kinglet image import` of docker-save archives and OCI image layouts
built here from the test images, from a file and from stdin."""
import gzip
import io
import json
import os
import subprocess
import tarfile

import pytest

from imagelib import Image, Tar, sha256


def _add(tar, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 1700000000
    tar.addfile(ti, io.BytesIO(data))


def _raw_layers(img):
    """docker save stores layers uncompressed."""
    out = []
    for blob, mt, diff_id in img.layers:
        if blob[:2] == b"\x1f\x8b":
            raw = gzip.decompress(blob)
        elif blob[:4] == b"\x28\xb5\x2f\xfd":
            raw = subprocess.run(["zstd", "-d", "-q", "-c"], input=blob, stdout=subprocess.PIPE,
                                 check=True).stdout
        else:
            raw = blob
        assert sha256(raw) == diff_id
        out.append(raw)
    return out


def docker_save(images_and_tags, symlink_dup=False):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        manifest, seen = [], {}
        for img, tags in images_and_tags:
            cfg = img.config_digest[7:] + ".json"
            _add(tar, cfg, img.config)
            layers = []
            for raw in _raw_layers(img):
                lid = sha256(raw)[7:]
                path = f"{lid}/layer.tar"
                if lid not in seen:
                    _add(tar, path, raw)
                    seen[lid] = path
                layers.append(path)
            manifest.append({"Config": cfg, "RepoTags": tags, "Layers": layers})
        _add(tar, "manifest.json", json.dumps(manifest).encode())
        _add(tar, "repositories", b"{}")
    return buf.getvalue()


def oci_layout(images_and_names):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        entries, seen = [], set()
        for img, name in images_and_names:
            for b in [img.manifest] + img.blobs():
                d = sha256(b)
                if d not in seen:
                    _add(tar, "blobs/sha256/" + d[7:], b)
                    seen.add(d)
            e = {"mediaType": img.media_type, "digest": img.manifest_digest,
                 "size": len(img.manifest)}
            if name:
                e["annotations"] = {"io.containerd.image.name": name,
                                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]}
            entries.append(e)
        _add(tar, "index.json", json.dumps({"schemaVersion": 2, "manifests": entries}).encode())
    return buf.getvalue()


def test_import_docker_save(kimage, images, tmp_path):
    arc = tmp_path / "save.tar"
    arc.write_bytes(docker_save([(images["busybox"], ["busybox:latest", "example.com/bb:1"]),
                                 (images["layers"], ["layers:v1"])]))
    out = kimage.run("import", str(arc)).stdout.split()
    assert out == [images["layers"].id]
    recs = {r["id"]: r for r in kimage.ls()}
    assert sorted(recs[images["busybox"].id]["repo_tags"]) == [
        "docker.io/library/busybox:latest", "example.com/bb:1"]
    assert recs[images["layers"].id]["repo_tags"] == ["docker.io/library/layers:v1"]
    assert recs[images["layers"].id]["user"] == "1000"
    info = kimage.inspect("layers:v1")
    l2 = info["snapshots"][2]
    assert os.getxattr(f"{l2}/opq", "trusted.overlay.opaque") == b"y"
    # the shared busybox layer is stored once
    assert len(kimage.snapshots()) == 4
    assert kimage.tmp_entries() == []


def test_import_same_layers_as_pull(kimage, registry, images, tmp_path):
    """An imported image and a pulled one share snapshots (same chain IDs)."""
    arc = tmp_path / "save.tar"
    arc.write_bytes(docker_save([(images["busybox"], ["busybox:latest"])]))
    kimage.run("import", str(arc))
    snaps = kimage.snapshots()
    kimage.run("pull", f"{registry.host}/busybox:latest")
    assert kimage.snapshots() == snaps
    (rec,) = kimage.ls()
    assert len(rec["repo_tags"]) == 2


def test_import_oci_layout_stdin(kimage, images, tmp_path):
    data = oci_layout([(images["multi-amd64"], "registry.example/multi:2"),
                       (images["busybox"], None)])
    p = subprocess.run([kimage.binary, "image", "--root", kimage.root, "import", "-"],
                       input=data, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    recs = {r["id"]: r for r in kimage.ls()}
    r = recs[images["multi-amd64"].id]
    assert r["repo_tags"] == ["registry.example/multi:2"]
    assert r["repo_digests"] == [f"registry.example/multi@{images['multi-amd64'].manifest_digest}"]
    assert r["manifest"] == images["multi-amd64"].manifest_digest
    assert recs[images["busybox"].id]["repo_tags"] == []
    assert kimage.tmp_entries() == []


def test_import_oci_index_selects_platform(kimage, images, tmp_path):
    doc, digest = images["multi-index"]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        for k in ("multi-amd64", "multi-arm64", "multi-armv7"):
            img = images[k]
            for b in [img.manifest] + img.blobs():
                _add(tar, "blobs/sha256/" + sha256(b)[7:], b)
        _add(tar, "blobs/sha256/" + digest[7:], doc)
        _add(tar, "index.json", json.dumps({"schemaVersion": 2, "manifests": [
            {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": digest,
             "size": len(doc), "annotations": {"io.containerd.image.name": "x.io/multi:1"}}]}).encode())
    arc = tmp_path / "oci.tar.gz"
    arc.write_bytes(gzip.compress(buf.getvalue()))
    out = kimage.run("import", str(arc)).stdout.split()
    assert out == [images["multi-amd64"].id]


def _evil_archive(kind):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if kind == "traversal":
            _add(tar, "../../../../tmp/kinglet-evil-import", b"x")
        elif kind == "symlink":
            ti = tarfile.TarInfo("manifest.json")
            ti.type = tarfile.SYMTYPE
            ti.linkname = "/etc/passwd"
            tar.addfile(ti)
        elif kind == "lying-layer":
            pass
    return buf.getvalue()


@pytest.mark.parametrize("kind", ["traversal", "symlink", "garbage", "lying-layer"])
def test_import_hostile(kimage, images, tmp_path, kind):
    arc = tmp_path / "evil.tar"
    raw = b""
    if kind == "garbage":
        arc.write_bytes(os.urandom(4096))
    elif kind == "lying-layer":
        # a layer whose content does not match the config's diff_id
        img = images["busybox"]
        data = docker_save([(img, ["evil:1"])])
        other = images["shared1"]
        raw = _raw_layers(other)[1]
        buf = io.BytesIO()
        with tarfile.open(fileobj=io.BytesIO(data)) as src, tarfile.open(fileobj=buf, mode="w") as dst:
            for m in src.getmembers():
                body = src.extractfile(m).read()
                if m.name.endswith("layer.tar"):
                    body = raw
                _add(dst, m.name, body)
        arc.write_bytes(buf.getvalue())
    else:
        arc.write_bytes(_evil_archive(kind))
    p = kimage.run("import", str(arc), check=False)
    assert p.returncode == 1
    assert not os.path.exists("/tmp/kinglet-evil-import")
    why = {
        "traversal": "archive entry `../../../../tmp/kinglet-evil-import` escapes the archive",
        "symlink": "the archive's manifest.json is a symlink that leads outside it",
        "garbage": "Unrecognized archive format",
        "lying-layer": "layer diff_id mismatch: got " + sha256(raw),
    }[kind]
    assert p.stderr.startswith(f"kinglet image: import `{arc}`: ") and why in p.stderr, p.stderr
    assert kimage.ls() == [] and kimage.snapshots() == [] and kimage.tmp_entries() == []


def test_import_layers_in_all_are_limited(kimage, tmp_path):
    """An archive's images have at most IMAGE_IMPORT_LAYERS_MAX (4,096)
    layers in all, a layer two images share counted for each: what the
    daemon lets an import helper ask for (a helper that asks for more is
    stopped). Here 17 images of 256 layers each, one tiny layer repeated:
    the import says so."""
    layers = [(Tar().file("f", "x").bytes(), "none")] * 256
    imgs = [Image(layers, config={"Cmd": ["/bin/sh"], "Env": [f"I={i}"]}) for i in range(17)]
    arc = tmp_path / "many.tar"
    arc.write_bytes(docker_save([(img, [f"many:{i}"]) for i, img in enumerate(imgs)]))
    p = kimage.run("import", str(arc), check=False)
    assert p.returncode == 1
    assert "the archive's images have more than 4096 layers in all" in p.stderr, p.stderr
    assert kimage.tmp_entries() == []


def _skopeo_archive(registry, repo, fmt, path, name):
    """`skopeo copy` of an image of the test registry into an archive of
    format fmt (docker-archive, oci-archive): a third party's writer."""
    import shutil
    if not shutil.which("skopeo"):
        pytest.skip("skopeo missing: install the Debian package skopeo (scripts/install-deps test)")
    p = subprocess.run(["skopeo", "--insecure-policy", "copy", "--quiet", "--src-tls-verify=false",
                        f"docker://{registry.host}/{repo}", f"{fmt}:{path}:{name}"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("fmt,repo,image", [
    ("docker-archive", "busybox:latest", "busybox"),
    ("docker-archive", "shared:v1", "shared1"),
    # zstd layers, whiteouts, an opaque directory, xattrs: OCI only
    ("oci-archive", "layers:latest", "layers"),
])
def test_import_skopeo_archives(kimage, registry, images, tmp_path, fmt, repo, image):
    """Archives written by Debian's skopeo import as the same image, with
    the same layers, as a pull of the same image."""
    arc = tmp_path / "skopeo.tar"
    _skopeo_archive(registry, repo, fmt, arc, "example.com/skopeo:1")
    out = kimage.run("import", str(arc)).stdout.split()
    img = images[image]
    assert out == [img.id]
    (rec,) = kimage.ls()
    assert rec["id"] == img.id
    assert "example.com/skopeo:1" in rec["repo_tags"], rec
    snaps = kimage.snapshots()
    assert len(snaps) == len(img.layers)
    kimage.run("pull", f"{registry.host}/{repo}")
    assert kimage.snapshots() == snaps, "the pull found every layer already unpacked"
    if image == "layers":
        l2 = kimage.inspect(img.id)["snapshots"][2]
        assert os.getxattr(f"{l2}/opq", "trusted.overlay.opaque") == b"y"
    assert kimage.tmp_entries() == []
