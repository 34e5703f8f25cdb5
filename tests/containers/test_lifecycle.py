"""The container lifecycle through the real gRPC client: create, start,
status, list, stop, remove."""
import os

import grpc
import pytest

from .conftest import wait_for


def test_run_to_completion(env):
    pb = env.pb
    pod = env.pod()
    cid = env.run(pod, "c1", ["/bin/sh", "-c", "exit 3"])
    st = env.wait_exited(cid)
    assert st.exit_code == 3
    assert st.reason == "Error"
    assert st.started_at > 0 and st.finished_at >= st.started_at
    assert st.image_id.startswith("sha256:")
    assert "@sha256:" in st.image_ref
    cs = env.list()
    assert [c.id for c in cs] == [cid]
    assert cs[0].state == pb.CONTAINER_EXITED
    env.remove(cid)
    assert not env.list()
    with pytest.raises(grpc.RpcError) as e:
        env.status(cid)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_stop_graceful(env):
    pb = env.pb
    pod = env.pod()
    cid = env.run(pod, "trapper", ["/bin/sh", "-c", "trap 'exit 42' TERM; sleep 1000 & wait"])
    assert env.status(cid).status.state == pb.CONTAINER_RUNNING
    env.wait_procs(cid, 2)  # the trap is set once sleep runs
    env.stop(cid, timeout=30)
    st = env.status(cid).status
    assert st.state == pb.CONTAINER_EXITED
    assert st.exit_code == 42
    env.stop(cid, timeout=10)  # idempotent
    env.remove(cid)
    env.remove(cid)  # idempotent


def test_stop_kills_after_timeout(env):
    """sleep as pid 1 of its namespace ignores SIGTERM: SIGKILL follows."""
    pb = env.pb
    pod = env.pod()
    cid = env.run(pod, "sleeper", ["/bin/sleep", "1000"])
    env.stop(cid, timeout=1)
    st = env.status(cid).status
    assert st.state == pb.CONTAINER_EXITED
    assert st.exit_code == 137


def test_pod_stop_and_remove_take_containers(env):
    pb = env.pb
    pod = env.pod()
    a = env.run(pod, "a", ["/bin/sh", "-c", "trap 'exit 7' TERM; sleep 1000 & wait"])
    env.wait_procs(a, 2)
    b = env.create(pod, None, env.config("b", command=["/bin/sleep", "1000"]))
    env.rs.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=pod[0]), timeout=60)
    sa, sb_ = env.status(a).status, env.status(b).status
    assert sa.state == pb.CONTAINER_EXITED and sa.exit_code == 7
    assert sb_.state == pb.CONTAINER_EXITED  # created, never started: killed
    env.rs.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=pod[0]), timeout=60)
    assert not env.list()
    assert not os.listdir(os.path.join(env.d.state, "containers"))
    assert [p for p in os.listdir(os.path.join(env.d.root, "containers"))] == []


def test_create_refused_cases(env):
    pb = env.pb
    pod = env.pod()
    cid = env.create(pod, None, env.config("dup"))
    with pytest.raises(grpc.RpcError) as e:
        env.create(pod, None, env.config("dup"))
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert cid in e.value.details()  # names the holder
    env.create(pod, None, env.config("dup", attempt=1))  # a new attempt is fine
    with pytest.raises(grpc.RpcError) as e:
        env.create(("0" * 64, None), None, env.config("x"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    cfg = env.config("img")
    cfg.image.image = "nosuch/image:latest"
    with pytest.raises(grpc.RpcError) as e:
        env.create(pod, None, cfg)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    cfg = env.config("logesc")
    cfg.log_path = "../../etc/evil.log"
    with pytest.raises(grpc.RpcError) as e:
        env.create(pod, None, cfg)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(env.list()) == 2


def test_list_filters(env):
    pb = env.pb
    p1, p2 = env.pod("one"), env.pod("two")
    a = env.create(p1, None, env.config("a", labels={"app": "x"}))
    b = env.run(p2, "b", ["/bin/sleep", "1000"], labels={"app": "y"})
    ids = lambda cs: sorted(c.id for c in cs)
    assert ids(env.list()) == sorted([a, b])
    assert ids(env.list(id=a[:12])) == [a]
    assert ids(env.list(pod_sandbox_id=p2[0][:10])) == [b]
    assert ids(env.list(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))) == [b]
    assert ids(env.list(state=pb.ContainerStateValue(state=pb.CONTAINER_CREATED))) == [a]
    assert ids(env.list(label_selector={"app": "x"})) == [a]
    assert ids(env.list(label_selector={"app": "z"})) == []
    c = env.list(id=b)[0]
    assert c.pod_sandbox_id == p2[0] and c.metadata.name == "b" and c.labels["app"] == "y"
    assert c.image_id.startswith("sha256:")


def test_update_resources_is_reported(env):
    pb = env.pb
    pod = env.pod()
    cid = env.run(pod, "u", ["/bin/sleep", "1000"],
                  linux=pb.LinuxContainerConfig(resources=pb.LinuxContainerResources(
                      memory_limit_in_bytes=256 << 20, cpu_shares=512)))
    st = env.status(cid).status
    assert st.resources.linux.memory_limit_in_bytes == 256 << 20
    env.rs.UpdateContainerResources(pb.UpdateContainerResourcesRequest(
        container_id=cid, linux=pb.LinuxContainerResources(memory_limit_in_bytes=128 << 20,
                                                           cpu_shares=1024)), timeout=10)
    st = env.status(cid).status
    assert st.resources.linux.memory_limit_in_bytes == 128 << 20
    assert st.resources.linux.cpu_shares == 1024
    env.kill9_restart()  # kept in the record
    st = env.status(cid).status
    assert st.resources.linux.memory_limit_in_bytes == 128 << 20
    env.rs.UpdatePodSandboxResources(pb.UpdatePodSandboxResourcesRequest(
        pod_sandbox_id=pod[0], resources=pb.LinuxContainerResources(cpu_shares=2048)),
        timeout=10)
    env.stop(cid)
    with pytest.raises(grpc.RpcError) as e:
        env.rs.UpdateContainerResources(pb.UpdateContainerResourcesRequest(
            container_id=cid, linux=pb.LinuxContainerResources(cpu_shares=2)), timeout=10)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_status_says_ready_and_what_is_not_enforced(env):
    import json
    pb = env.pb
    # ready once recovery at start is over (milliseconds)
    st = wait_for(lambda: (lambda s: s if s.status.conditions[0].status else None)(
        env.rs.Status(pb.StatusRequest(verbose=True), timeout=10)), what="RuntimeReady")
    conds = {c.type: c for c in st.status.conditions}
    assert conds["RuntimeReady"].type == "RuntimeReady"
    cfg = json.loads(st.info["config"])
    ctl = set(cfg["cgroup2Controllers"].split())
    missing = {c for c in ("cpu", "cpuset", "io", "memory", "pids") if c not in ctl}
    got = {c.strip() for c in cfg["limitsNotEnforced"].split(",") if c.strip()}
    assert got == missing
    # the same in a condition (which does not gate readiness)
    lim = conds["ResourceLimitsEnforced"]
    assert lim.status == (not missing), lim
    if missing:
        assert "will not be enforced" in env.d.logtext()
        assert all(c in lim.message for c in missing), lim.message
