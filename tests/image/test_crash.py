"""A 100 MB layer, and SIGKILL in the middle of pulling it: the store stays
consistent (nothing half-pulled is listed, leftovers go at the next start)
and the pull can be repeated."""
import os
import signal

import pytest

import imagelib
from imagelib import FakeRegistry, Image, Tar, busybox_layer
from waiting import wait_for

BIG = 100 << 20


@pytest.fixture(scope="module")
def big_image():
    return Image([(busybox_layer(), "gzip"),
                  (Tar().bigfile("big/random.bin", BIG).bytes(), "gzip"),
                  (Tar().file("top", "top").bytes(), "zstd")])


@pytest.mark.slow
def test_pull_100mb_layer(kimage, registry, big_image):
    registry.pusher().push_image("big", "latest", big_image)
    ref = f"{registry.host}/big:latest"
    out = kimage.run("pull", ref).stdout.split()
    assert out == [big_image.id]
    snaps = kimage.inspect(ref)["snapshots"]
    assert os.path.getsize(os.path.join(snaps[1], "big/random.bin")) == BIG


@pytest.mark.slow
def test_sigkill_during_pull(kimage, big_image):
    f = FakeRegistry(throttle=0.02).start()  # ~2 s for the big layer
    try:
        f.add_image("big", big_image)
        ref = f"{f.host}/x/big:big"
        opts = ["--insecure-registry", f.host]
        proc = kimage.popen("pull", ref, opts=opts)
        tmp = kimage.store() / "tmp"

        def partial():
            # the big file is being written under tmp/
            for d in tmp.glob("*/fs/big/random.bin") if tmp.exists() else []:
                if d.stat().st_size > (8 << 20):
                    return True
            return False
        wait_for(partial, what="a partially unpacked layer")
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
        assert proc.returncode == -signal.SIGKILL
        assert kimage.tmp_entries() != [], "the kill left work in progress"

        # next start: nothing half-pulled is listed, leftovers are gone
        assert kimage.ls() == []
        assert kimage.tmp_entries() == []
        assert kimage.snapshots() == [], "finished layers of an unrecorded image are collected"

        f.throttle = 0
        out = kimage.run("pull", ref, opts=opts).stdout.split()
        assert out == [big_image.id]
        assert len(kimage.snapshots()) == 3
        assert kimage.tmp_entries() == []
    finally:
        f.stop()
