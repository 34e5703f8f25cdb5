"""Image volumes (KEP-4639, GA in Kubernetes 1.36) through the real gRPC
client: a Mount with `image` set mounts that image read-only in the
container, with `image_sub_path` only a directory of it. kubelet pulls the
image first; the runtime refuses a missing one with NOT_FOUND, keeps the
image from removal while a container mounts it, and keeps all of it across
a restart of the daemon."""
import os

import grpc
import pytest

from .conftest import wait_for


def vol(env, path, image="volume", sub=""):
    pb = env.pb
    return pb.Mount(container_path=path, image=pb.ImageSpec(image=env.refs[image]),
                    readonly=True, image_sub_path=sub)


def run_with(env, pod, name, mounts):
    cid = env.create(pod, None, env.config(name, command=["/bin/sleep", "1000"], mounts=mounts))
    env.start(cid)
    return cid


def sh(env, cid, script):
    r = env.rs.ExecSync(env.pb.ExecSyncRequest(container_id=cid, cmd=["/bin/sh", "-c", script]),
                        timeout=60)
    return r.exit_code, r.stdout.decode(), r.stderr.decode()


def image_id(env, name):
    st = env.ims.ImageStatus(env.pb.ImageStatusRequest(image=env.pb.ImageSpec(
        image=env.refs[name])), timeout=10)
    return st.image.id


def remove_image(env, name):
    env.ims.RemoveImage(env.pb.RemoveImageRequest(image=env.pb.ImageSpec(image=env.refs[name])),
                        timeout=30)


def image_fs_used(env):
    r = env.ims.ImageFsInfo(env.pb.ImageFsInfoRequest(), timeout=10)
    return r.image_filesystems[0].used_bytes.value


def imagevol_mounts(env):
    return [m for m in env.d.own_mounts() if "/imagevols/" in m]


def test_whole_images_read_only(env):
    """Two image volumes: a two-layer image (an overlay of its layers) and
    a one-layer one (a read-only bind of its layer). The container reads
    the files of both layers; a write fails; the status names each image
    by its id, as kubelet's image garbage collection expects."""
    pod = env.pod()
    cid = run_with(env, pod, "c", [vol(env, "/vol"), vol(env, "/bb", image="busybox")])
    code, out, err = sh(env, cid, "cat /vol/top /vol/data/sub/file /vol/data/sub/two")
    assert (code, out) == (0, "top\none\ntwo\n"), err
    code, out, err = sh(env, cid, "cat /bb/etc/group")
    assert code == 0 and out.startswith("root:x:0:"), err
    for path in ("/vol/data/new", "/vol/top", "/bb/etc/group"):
        code, out, err = sh(env, cid, f"echo x > {path}")
        assert code != 0 and "Read-only file system" in err, (path, code, err)
    code, out, err = sh(env, cid, "grep -E ' /(vol|bb) ' /proc/self/mounts")
    assert code == 0 and all(" ro," in line for line in out.splitlines()), out
    assert len(out.splitlines()) == 2, out
    mounts = env.status(cid).status.mounts
    assert [(m.container_path, m.image.image) for m in mounts] == [
        ("/vol", image_id(env, "volume")), ("/bb", image_id(env, "busybox"))]
    assert all(m.image.image_ref.startswith(env.refs[n].rsplit(":", 1)[0] + "@sha256:")
               for m, n in zip(mounts, ("volume", "busybox"))), mounts
    env.remove(cid)
    assert imagevol_mounts(env) == []


def test_host_path_ignored(env):
    """A host_path next to an image is ignored (as containerd does): the
    image is mounted, never the host's directory."""
    pb = env.pb
    pod = env.pod()
    m = pb.Mount(container_path="/vol", host_path="/", readonly=False,
                 image=pb.ImageSpec(image=env.refs["volume"]))
    cid = run_with(env, pod, "c", [m])
    code, out, err = sh(env, cid, "ls /vol; touch /vol/x")
    assert out == "data\ntop\n" and "Read-only file system" in err, (out, err)


def test_sub_path(env):
    """image_sub_path mounts only that directory of the image (merged from
    both layers), also through a symlink that stays inside the image."""
    pod = env.pod()
    cid = run_with(env, pod, "c", [vol(env, "/sub", sub="data/sub"),
                                   vol(env, "/via", sub="data/inside")])
    code, out, err = sh(env, cid, "ls /sub; cat /sub/file /via/two")
    assert (code, out) == (0, "file\ntwo\none\ntwo\n"), err
    code, out, err = sh(env, cid, "ls /sub/top /sub/data")
    assert code != 0, out
    code, out, err = sh(env, cid, "touch /sub/new")
    assert code != 0 and "Read-only file system" in err, err


def test_missing_image_is_not_found(env):
    pb = env.pb
    pod = env.pod()
    missing = pb.Mount(container_path="/vol", readonly=True,
                       image=pb.ImageSpec(image="127.0.0.1:1/absent:latest"))
    with pytest.raises(grpc.RpcError) as e:
        env.create(pod, None, env.config("c", command=["/bin/true"], mounts=[missing]))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND, e.value
    assert "image volume mounts[0]: image `127.0.0.1:1/absent:latest` not found" in \
        e.value.details(), e.value.details()
    assert len(env.list()) == 0


@pytest.mark.parametrize("sub,code,words", [
    ("data/nope", grpc.StatusCode.NOT_FOUND, "does not exist in the image"),
    ("data/sub/file/x", grpc.StatusCode.NOT_FOUND, "does not exist in the image"),
    ("data/out", grpc.StatusCode.INVALID_ARGUMENT, "leads out of the image"),
    ("data/abs", grpc.StatusCode.INVALID_ARGUMENT, "leads out of the image"),
    ("data/../..", grpc.StatusCode.INVALID_ARGUMENT, "must be a relative path without `..`"),
    ("/data", grpc.StatusCode.INVALID_ARGUMENT, "must be a relative path without `..`"),
])
def test_bad_sub_path(env, sub, code, words):
    """A sub path that does not exist or leaves the image (through `..` or
    a symlink) fails clearly, and leaves no mount, container or hold."""
    pod = env.pod()
    with pytest.raises(grpc.RpcError) as e:
        env.create(pod, None, env.config("c", command=["/bin/true"],
                                         mounts=[vol(env, "/vol", sub=sub)]))
    assert e.value.code() == code, e.value
    assert f"image_sub_path `{sub}` {words}" in e.value.details(), e.value.details()
    assert len(env.list()) == 0
    assert imagevol_mounts(env) == []
    remove_image(env, "volume")  # no hold was left behind


def test_image_held_while_mounted(env):
    """RemoveImage of a mounted image fails (as in CRI-O), also while the
    container has exited; it works once the container is removed."""
    pb = env.pb
    pod = env.pod()
    cid = env.create(pod, None, env.config("c", command=["/bin/cat", "/vol/top"],
                                           mounts=[vol(env, "/vol")]))
    env.start(cid)
    assert env.wait_exited(cid).exit_code == 0
    vid = image_id(env, "volume")
    for ref in (env.refs["volume"], vid):
        with pytest.raises(grpc.RpcError) as e:
            env.ims.RemoveImage(pb.RemoveImageRequest(image=pb.ImageSpec(image=ref)), timeout=30)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION, e.value
        assert f"is in use by container `{cid}` as an image volume" in e.value.details()
    assert image_id(env, "volume") == vid
    # the image's layers stay counted in the image filesystem while held,
    # as containerd counts the snapshots its volumes use
    held = image_fs_used(env)
    env.remove(cid)
    assert image_fs_used(env) == held
    remove_image(env, "volume")
    assert image_id(env, "volume") == ""
    wait_for(lambda: image_fs_used(env) < held, what="the volume's layers to be collected")


def test_restart_keeps_mount_and_hold(env):
    """The daemon killed and started again: the container still reads its
    image volume, the image is still held, and removal ends both."""
    pb = env.pb
    pod = env.pod()
    cid = run_with(env, pod, "c", [vol(env, "/sub", sub="data/sub")])
    created = env.create(pod, None, env.config("created", command=["/bin/cat", "/vol/top"],
                                               mounts=[vol(env, "/vol")]))
    assert len(imagevol_mounts(env)) == 2
    env.kill9_restart()
    assert sh(env, cid, "cat /sub/two")[:2] == (0, "two\n")
    # the container created before the restart starts on its mount
    env.start(created)
    st = env.wait_exited(created)
    assert st.exit_code == 0
    log = env.logdir / pod[1].metadata.uid / "created" / "0.log"
    wait_for(lambda: log.exists() and "top" in log.read_text(), what="the created one's output")
    with pytest.raises(grpc.RpcError) as e:
        remove_image(env, "volume")
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION, e.value
    env.remove(created)
    with pytest.raises(grpc.RpcError) as e:
        remove_image(env, "volume")  # cid still holds it
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION, e.value
    env.remove(cid)
    assert imagevol_mounts(env) == []
    remove_image(env, "volume")
    assert env.ims.ListImages(pb.ListImagesRequest(), timeout=10).images  # the others stay
    assert image_id(env, "volume") == ""


def test_create_cut_short_leaves_no_hold(env):
    """SIGKILL while CreateContainer mounts (its holds are saved, its record
    is not): after a restart no mount is left and the image is free."""
    import threading
    from .conftest import channel
    from .test_recovery import held_by_strace
    pod = env.pod()
    tracer = held_by_strace(env, "mount", "delay_enter")
    errors = []

    def create():
        try:
            env.create(pod, None, env.config("cut", command=["/bin/true"],
                                             mounts=[vol(env, "/vol")]))
        except grpc.RpcError as e:  # the daemon dies under it
            errors.append(e)
    t = threading.Thread(target=create, daemon=True)
    t.start()
    bundles = os.path.join(env.d.state, "containers")
    wait_for(lambda: os.path.isdir(bundles) and os.listdir(bundles), what="the bundle")
    assert t.is_alive() and not errors, "the call ended before the daemon was killed"
    env.kill9()
    tracer.wait(30)
    t.join(30)
    assert len(errors) == 1, errors
    env.restart()
    assert len(env.list()) == 0
    assert imagevol_mounts(env) == []
    remove_image(env, "volume")
    assert image_id(env, "volume") == ""
