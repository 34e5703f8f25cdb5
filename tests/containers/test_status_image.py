"""ContainerStatus.image as containerd reports it, for containers created
the way kubelet creates them: ContainerConfig.image.image is the image id
kubelet resolved (ImageStatus), user_specified_image the reference the pod
names. kubelet copies status.image.image into the pod's status, where
`kubectl get pod`, `describe` and every check against the spec read it:
it is the pod's reference when kubelet sent one, else the image's first
tag, else its id; image_ref and image_id name the image itself."""
import json
import os
import subprocess
import uuid

import grpc
import pytest

from image.test_import import docker_save
from imagelib import Image

from .conftest import BUSYBOX_CONFIG, busybox_full_layer

APP_1 = "registry.example/app:1.0"
APP_STABLE = "registry.example/app:stable"


def kimport(env, tmp_path, images_and_tags):
    """Imports images (with their tags) into the running daemon."""
    arc = tmp_path / f"{uuid.uuid4().hex}.tar"
    arc.write_bytes(docker_save(images_and_tags))
    subprocess.run([env.d.binary, "image", "--socket", env.d.sock, "import", str(arc)],
                   check=True, capture_output=True, timeout=120)


def image_status(env, ref):
    pb = env.pb
    return env.ims.ImageStatus(pb.ImageStatusRequest(image=pb.ImageSpec(image=ref)),
                               timeout=30).image


def kubelet_create(env, pod, name, ref, attempt=0, user_specified=True):
    """What kubelet does: the image's id from ImageStatus of the pod's
    reference goes in image, the reference in user_specified_image."""
    pb = env.pb
    img = image_status(env, ref)
    assert img.id, f"{ref} is not in the store"
    cfg = env.config(name, command=["/bin/sleep", "100000"], attempt=attempt)
    cfg.image.CopyFrom(pb.ImageSpec(image=img.id,
                                    user_specified_image=ref if user_specified else ""))
    cid = env.create(pod, None, cfg)
    env.start(cid)
    return cid, img


def shown(env, cid):
    st = env.status(cid).status
    return st.image.image, st.image_id, st.image_ref


def expected_ref(img):
    return img.repo_digests[0] if img.repo_digests else img.id


def test_status_image_is_the_pods_reference(env, tmp_path):
    pb = env.pb
    layer = busybox_full_layer()
    v1 = Image([(layer, "gzip")], config=dict(BUSYBOX_CONFIG, Env=["PATH=/bin", "V=1"]))
    v2 = Image([(layer, "gzip")], config=dict(BUSYBOX_CONFIG, Env=["PATH=/bin", "V=2"]))
    untagged = Image([(layer, "gzip")], config=dict(BUSYBOX_CONFIG, Env=["PATH=/bin", "V=0"]))
    # two tags of one image id
    kimport(env, tmp_path, [(v1, [APP_1, APP_STABLE]), (untagged, [])])
    pod = env.pod("img")
    a, img1 = kubelet_create(env, pod, "a", APP_1)
    b, _ = kubelet_create(env, pod, "b", APP_STABLE)
    assert img1.id == v1.id
    assert shown(env, a) == (APP_1, v1.id, expected_ref(img1))
    assert shown(env, b) == (APP_STABLE, v1.id, expected_ref(img1))
    # a client that sends no user_specified_image (an older kubelet):
    # the image's first tag; an image without tags: its id
    c, _ = kubelet_create(env, pod, "c", APP_STABLE, user_specified=False)
    tags = list(image_status(env, v1.id).repo_tags)
    assert shown(env, c)[0] == tags[0]
    d, imgu = kubelet_create(env, pod, "d", untagged.id, user_specified=False)
    assert not imgu.repo_tags
    assert shown(env, d) == (untagged.id, untagged.id, expected_ref(imgu))
    # ListContainers shows the image as kubelet sent it, as containerd does
    listed = {x.id: x for x in env.list(pod_sandbox_id=pod[0])}
    assert (listed[a].image.image, listed[a].image.user_specified_image) == (v1.id, APP_1)
    assert listed[a].image_ref == expected_ref(img1)

    # the tag moves to another image in place; kubelet restarts the
    # container on the new image, and the new container reports its own
    kimport(env, tmp_path, [(v2, [APP_1])])
    a2, img2 = kubelet_create(env, pod, "a", APP_1, attempt=1)
    assert img2.id == v2.id != v1.id
    assert shown(env, a2) == (APP_1, v2.id, expected_ref(img2))
    assert shown(env, a) == (APP_1, v1.id, expected_ref(img1))
    # the first tag was chosen when c was made: v1 kept APP_STABLE
    before = {cid: shown(env, cid) for cid in (a, b, c, d, a2)}

    # all of it is in the records: the same after a restart of the daemon,
    # and for a record an older kinglet wrote (the image as kubelet sent it)
    env.kill9()
    rec = os.path.join(env.d.root, "containers", a + ".json")
    with open(rec) as f:
        r = json.load(f)
    r["image"] = v1.id
    with open(rec, "w") as f:
        json.dump(r, f)
    env.restart()
    assert {cid: shown(env, cid) for cid in before} == before
    assert all(env.status(cid).status.state == pb.CONTAINER_RUNNING for cid in before)


def test_an_overlong_user_specified_image_is_refused(env):
    """The record keeps the reference, and a record must stay readable."""
    pb = env.pb
    pod = env.pod("long")
    img = image_status(env, env.refs["busybox"])
    cfg = env.config("x", command=["/bin/true"])
    cfg.image.CopyFrom(pb.ImageSpec(image=img.id, user_specified_image="r/" + "a" * 5000))
    with pytest.raises(grpc.RpcError) as e:
        env.create(pod, None, cfg)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert not env.list(pod_sandbox_id=pod[0])
