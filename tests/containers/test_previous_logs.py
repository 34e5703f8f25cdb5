"""`kubectl logs --previous` as kubelet serves it for a crash-looping
container: the previous attempt's ContainerStatus gives its log_path, and
that file holds the whole of the attempt's output, while the next attempt
of the same name runs in the same pod.

kubelet's sequence: the attempt exits (ContainerStatus says EXITED); its
pod is relisted (ListContainers by the pod's uid label, ContainerStatus of
each); attempt+1 is created with log_path <name>/<attempt+1>.log and
started; the user asks for the previous logs: ContainerStatus(previous id)
and a read of its log_path."""
import os

from .conftest import wait_for

LINES = 40000  # ~1 MB a burst: more than a pipe and the monitor's buffer hold


def crash_config(env, attempt, uid):
    # each attempt writes LINES numbered lines on stdout at once and one on
    # stderr, then exits with an error, as a crash-looping container does
    script = (f"seq 0 {LINES - 1} | sed 's/^/attempt-{attempt}-line-/'; "
              f"echo attempt-{attempt}-dying >&2; exit 3")
    return env.config("crash", command=["/bin/sh", "-c", script], attempt=attempt,
                      labels={"io.kubernetes.pod.uid": uid},
                      annotations={"io.kubernetes.container.restartCount": str(attempt)})


def relist(env, uid):
    """kubelet's GetPodStatus: the pod's containers and the status of each."""
    out = {}
    for c in env.list(label_selector={"io.kubernetes.pod.uid": uid}):
        out[c.id] = env.status(c.id).status
    return out


def assert_complete(env, st, attempt):
    assert st.log_path, f"attempt {attempt}: no log_path in its status"
    with open(st.log_path, "rb") as f:
        lines = f.read().split(b"\n")
    assert lines.pop() == b""
    recs = [line.split(b" ", 3) for line in lines]
    assert all(len(r) == 4 and r[2] == b"F" for r in recs), [r for r in recs if len(r) != 4][:3]
    out = [r[3] for r in recs if r[1] == b"stdout"]
    want = [f"attempt-{attempt}-line-{i}".encode() for i in range(LINES)]
    assert out == want, (f"attempt {attempt}: {len(out)} of {LINES} lines in {st.log_path}: "
                         f"{[r[3][:120] for r in recs if r[1] == b'stderr']}")
    assert [r[3] for r in recs if r[1] == b"stderr"] == [f"attempt-{attempt}-dying".encode()]


def test_previous_log_while_the_next_attempt_runs(env):
    pb = env.pb
    pod = env.pod("crashloop")
    uid = pod[1].metadata.uid
    prev = None
    for attempt in range(50):
        cid = env.create(pod, None, crash_config(env, attempt, uid))
        env.start(cid)
        if prev is not None:
            # kubectl logs --previous, right after the restart
            st = env.status(prev).status
            assert st.state == pb.CONTAINER_EXITED
            assert st.log_path.endswith(f"/crash/{attempt - 1}.log")
            assert_complete(env, st, attempt - 1)
        st = env.wait_exited(cid)
        # the moment ContainerStatus says exited, the log is whole
        assert_complete(env, st, attempt)
        statuses = relist(env, uid)
        assert statuses[cid].state == pb.CONTAINER_EXITED
        if prev is not None:
            # kubelet keeps the latest dead attempt and removes the older ones
            env.remove(prev)
            assert os.path.exists(statuses[prev].log_path)
        prev = cid
