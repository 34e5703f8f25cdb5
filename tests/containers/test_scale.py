"""Many containers across many pods: created, started, listed, stopped and
removed concurrently, with nothing left behind; and images in use."""
import concurrent.futures
import json
import os
import time

from .conftest import channel, wait_for


def test_100_containers_in_20_pods_leave_nothing(env):
    pb = env.pb
    d = env.d
    env.rs.Version(pb.VersionRequest(), timeout=10)
    # what the first pod loads for good (libnftnl)
    # is not a leak: one pod comes and goes before the baseline
    warm = env.pod("warm")[0]
    env.rs.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=warm), timeout=60)
    env.rs.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=warm), timeout=60)
    fds, rss = d.settled_fds(), d.rss_kb()
    mounts = env.d.own_mounts()
    pods = [env.pod(f"p{i}") for i in range(20)]

    def one(i):
        rs = env.cri.grpc.RuntimeServiceStub(channel(d))
        pod = pods[i % 20]
        cid = rs.CreateContainer(pb.CreateContainerRequest(
            pod_sandbox_id=pod[0], sandbox_config=pod[1],
            config=env.config(f"c{i}", command=["/bin/sleep", "1000"])), timeout=120).container_id
        rs.StartContainer(pb.StartContainerRequest(container_id=cid), timeout=120)
        return cid
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(20) as ex:
        ids = list(ex.map(one, range(100)))
    took = time.monotonic() - t0
    cs = env.list(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))
    assert sorted(c.id for c in cs) == sorted(ids)
    # kubelet lists every second: from memory, fast
    cpu0 = d.cpu_seconds()
    for _ in range(20):
        env.list()
    # the daemon's CPU time per list of 100 (wall time would count whatever
    # else the machine runs)
    assert (d.cpu_seconds() - cpu0) / 20 < 0.005
    with concurrent.futures.ThreadPoolExecutor(20) as ex:
        list(ex.map(lambda c: env.stop(c, timeout=0), ids))
    with concurrent.futures.ThreadPoolExecutor(20) as ex:
        list(ex.map(env.remove, ids))
    for p, _ in pods:
        env.rs.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=p), timeout=60)
        env.rs.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=p), timeout=60)
    assert len(env.list()) == 0
    assert not env.monitors()
    for sub in ("containers", "oci"):
        path = os.path.join(d.state, sub)
        assert not os.path.isdir(path) or not os.listdir(path)
    assert not os.listdir(os.path.join(d.root, "containers"))
    assert env.d.own_mounts() == mounts
    cg = os.path.join("/sys/fs/cgroup/unified" if os.path.exists("/sys/fs/cgroup/unified/cgroup.procs")
                      else "/sys/fs/cgroup", env.cgroup_parent.lstrip("/"))
    assert not [x for x in os.listdir(cg) if os.path.isdir(os.path.join(cg, x))]
    d.wait_fds_back(fds)
    if not d.sanitized():
        assert d.rss_kb() < rss + 2048, f"{rss} kB before, {d.rss_kb()} kB after"
    print(f"100 containers in 20 pods created and started in {took:.2f}s")


def test_removing_an_image_in_use(env):
    pb = env.pb
    pod = env.pod()
    cid = env.run(pod, "keep", ["/bin/sleep", "1000"])
    img = env.status(cid).status.image_id
    st = env.ims.ImageStatus(pb.ImageStatusRequest(image=pb.ImageSpec(image=img), verbose=True),
                             timeout=10)
    layers = {la["chainID"].split(":")[-1] for la in json.loads(st.info["info"])["layers"]}
    assert layers
    # every image goes (the container's image's layers and others')
    for i in env.ims.ListImages(pb.ListImagesRequest(), timeout=10).images:
        env.ims.RemoveImage(pb.RemoveImageRequest(image=pb.ImageSpec(image=i.id)), timeout=30)
    assert not env.ims.ImageStatus(pb.ImageStatusRequest(image=pb.ImageSpec(image=img)),
                                   timeout=10).HasField("image")
    # the container runs on, and its layers stay until it is removed
    r = env.rs.ExecSync(pb.ExecSyncRequest(container_id=cid, cmd=["/bin/ls", "/bin/busybox"]),
                        timeout=30)
    assert r.exit_code == 0
    assert layers <= set(os.listdir(os.path.join(env.d.root, "image", "snapshots")))
    env.stop(cid)
    env.remove(cid)
    wait_for(lambda: not os.listdir(os.path.join(env.d.root, "image", "snapshots")),
             what="the unused layers to be collected")
