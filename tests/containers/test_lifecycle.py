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
