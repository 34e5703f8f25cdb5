"""The list streaming RPCs of KEP-5825 (StreamPodSandboxes, StreamContainers,
StreamImages, StreamContainerStats, StreamPodSandboxStats,
StreamPodSandboxMetrics): the same items as the unary List calls, with the
same filters, in bounded chunks; a node with tens of thousands of exited
containers streams with bounded daemon memory where the unary list passes
the 16 MiB message limit; a client that goes away mid-stream leaves nothing
held."""
import concurrent.futures
import os

import grpc
import pytest

from .conftest import channel, clone_exited, env_cleanup, stream_ids, unclone, wait_for

# kubelet's limit on a CRI answer, and the daemon's
MAX_MSG = 16 << 20
# Exited containers for the scale tests; each record is padded so that the
# unary list passes MAX_MSG whatever the count (the figure is 20,000;
# test_recovery's test_every_record_is_loaded_at_start goes past that).
EXITED = int(os.environ.get("KINGLET_TEST_EXITED", "16000"))
# removed while a stream is under way (past what the client has read)
REMOVED = min(EXITED // 4, 500)


def stub(env, service="RuntimeServiceStub"):
    ch = channel(env.d, **{"grpc.max_receive_message_length": MAX_MSG + 1024})
    return getattr(env.cri.grpc, service)(ch)


def streamed(call):
    """Every item of a stream, and the number of chunks it came in."""
    items, chunks = [], 0
    for chunk in call:
        field = chunk.DESCRIPTOR.fields[0].name
        items.extend(getattr(chunk, field))
        chunks += 1
    return items, chunks


def test_each_stream_answers_as_its_list(env):
    pb = env.pb
    rs, ims = env.rs, env.ims
    a, b = env.pod("a", labels={"app": "x"}), env.pod("b", labels={"app": "y"})
    run_a = env.run(a, "run-a", ["/bin/sleep", "1000"], labels={"tier": "web"})
    run_b = env.run(b, "run-b", ["/bin/sleep", "1000"], labels={"tier": "db"})
    done = env.run(a, "done", ["/bin/true"], labels={"tier": "web"})
    env.wait_exited(done)
    made = env.create(b, None, env.config("made", command=["/bin/true"]))

    def same_containers(f):
        want = rs.ListContainers(pb.ListContainersRequest(filter=f), timeout=10).containers
        got, _ = streamed(rs.StreamContainers(pb.StreamContainersRequest(filter=f), timeout=10))
        assert got == list(want)
        return {c.id for c in got}

    assert same_containers(None) == {run_a, run_b, done, made}
    assert same_containers(pb.ContainerFilter(id=done[:12])) == {done}
    assert same_containers(pb.ContainerFilter(pod_sandbox_id=b[0])) == {run_b, made}
    assert same_containers(pb.ContainerFilter(
        state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))) == {run_a, run_b}
    assert same_containers(pb.ContainerFilter(label_selector={"tier": "web"})) == {run_a, done}
    assert same_containers(pb.ContainerFilter(id="0" * 64)) == set()

    def same_pods(f):
        want = rs.ListPodSandbox(pb.ListPodSandboxRequest(filter=f), timeout=10).items
        got, _ = streamed(rs.StreamPodSandboxes(pb.StreamPodSandboxesRequest(filter=f),
                                                timeout=10))
        assert got == list(want)
        return {p.id for p in got}

    assert same_pods(None) == {a[0], b[0]}
    assert same_pods(pb.PodSandboxFilter(id=a[0][:12])) == {a[0]}
    assert same_pods(pb.PodSandboxFilter(label_selector={"app": "y"})) == {b[0]}
    assert same_pods(pb.PodSandboxFilter(
        state=pb.PodSandboxStateValue(state=pb.SANDBOX_NOTREADY))) == set()

    def same_images(f):
        want = ims.ListImages(pb.ListImagesRequest(filter=f), timeout=10).images
        got, _ = streamed(ims.StreamImages(pb.StreamImagesRequest(filter=f), timeout=10))
        assert got == list(want)
        return [i.id for i in got]

    everything = same_images(None)
    assert everything
    assert same_images(pb.ImageFilter(image=pb.ImageSpec(image=env.refs["busybox"]))) == \
        [env.status(run_a).status.image_id]
    assert same_images(pb.ImageFilter(image=pb.ImageSpec(image="absent:1"))) == []

    # stats: the same records (their figures are measured anew each time),
    # of the containers that run or are created, as containerd reports
    def stat_ids(stats):
        return sorted((s.attributes.id, s.attributes.metadata.name) for s in stats)

    for f, want in ((None, {run_a, run_b, made}),
                    (pb.ContainerStatsFilter(pod_sandbox_id=a[0]), {run_a}),
                    (pb.ContainerStatsFilter(id=run_b), {run_b}),
                    (pb.ContainerStatsFilter(id=run_b[:12]), {run_b}),
                    (pb.ContainerStatsFilter(id=run_b, pod_sandbox_id=a[0]), set()),
                    (pb.ContainerStatsFilter(pod_sandbox_id="0" * 64), set()),
                    (pb.ContainerStatsFilter(label_selector={"tier": "db"}), {run_b})):
        unary = rs.ListContainerStats(pb.ListContainerStatsRequest(filter=f), timeout=30).stats
        got, _ = streamed(rs.StreamContainerStats(pb.StreamContainerStatsRequest(filter=f),
                                                  timeout=30))
        assert stat_ids(got) == stat_ids(unary)
        assert {s.attributes.id for s in got} == want, (f, [s.attributes.metadata.name for s in got])
        assert all(s.cpu.usage_core_nano_seconds.value > 0 for s in got
                   if s.attributes.id != made)

    mine = {a[0]: {run_a}, b[0]: {run_b, made}}

    def pod_stats(stats):
        return sorted((s.attributes.id, tuple(stat_ids(s.linux.containers))) for s in stats)

    for f, want in ((None, {a[0], b[0]}),
                    (pb.PodSandboxStatsFilter(id=b[0]), {b[0]}),
                    (pb.PodSandboxStatsFilter(id=b[0][:12]), {b[0]}),
                    (pb.PodSandboxStatsFilter(label_selector={"app": "x"}), {a[0]})):
        unary = rs.ListPodSandboxStats(pb.ListPodSandboxStatsRequest(filter=f), timeout=30).stats
        got, _ = streamed(rs.StreamPodSandboxStats(pb.StreamPodSandboxStatsRequest(filter=f),
                                                   timeout=30))
        assert pod_stats(got) == pod_stats(unary)
        assert {s.attributes.id for s in got} == want, (f, [s.attributes.metadata.name for s in got])
        # each pod with its own containers (created in turns between the pods)
        for s in got:
            assert {c.attributes.id for c in s.linux.containers} == mine[s.attributes.id]

    def metrics(pods):
        return sorted((p.pod_sandbox_id, tuple(sorted(m.name for m in p.metrics)),
                       tuple(sorted((c.container_id, tuple(sorted(m.name for m in c.metrics)))
                                    for c in p.container_metrics))) for p in pods)

    unary = rs.ListPodSandboxMetrics(pb.ListPodSandboxMetricsRequest(), timeout=30).pod_metrics
    got, _ = streamed(rs.StreamPodSandboxMetrics(pb.StreamPodSandboxMetricsRequest(), timeout=30))
    assert metrics(got) == metrics(unary)
    assert {p.pod_sandbox_id for p in got} == {a[0], b[0]}
    assert {c.container_id for p in got for c in p.container_metrics} == {run_a, run_b, made}
    for p in got:
        assert {c.container_id for c in p.container_metrics} == mine[p.pod_sandbox_id]


def vm_hwm_kb(d):
    with open(f"/proc/{d.pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def reset_hwm(d):
    """Peak RSS starts again from the current RSS (Linux 4.0+)."""
    with open(f"/proc/{d.pid}/clear_refs", "w") as f:
        f.write("5")


@pytest.fixture
def many_exited(env):
    """A pod with EXITED exited containers, made cheaply (clone_exited)."""
    pb = env.pb
    pod = env.pod("many")
    cid = env.run(pod, "c", ["/bin/true"])
    env.wait_exited(cid)
    env.kill9()
    # pad each item so that the count passes the message limit
    pad = max(0, (MAX_MSG + (1 << 20)) // EXITED - 300)

    def edit(cfg, i):
        cfg.annotations["pad"] = "x" * pad
        cfg.labels["half"] = str(i % 2)
    ids = clone_exited(env, cid, EXITED, edit)
    env.restart()
    wait_for(lambda: len(streamed(env.rs.StreamPodSandboxes(
        pb.StreamPodSandboxesRequest(), timeout=30))[0]) == 1, timeout=60,
        what="the daemon to recover")
    yield pod, set(ids) | {cid}
    # the clones go as they came, so that the env's own clean-up lists a
    # node of ordinary size
    if env.d.proc.poll() is None:
        env.kill9()
    unclone(env, ids)
    env.restart()


def test_many_exited_containers_stream_in_bounded_memory(env, many_exited):
    pb = env.pb
    d = env.d
    _, ids = many_exited
    rs = stub(env)
    rs.Version(pb.VersionRequest(), timeout=10)
    reset_hwm(d)
    base = d.rss_kb()
    got, chunks = streamed(rs.StreamContainers(pb.StreamContainersRequest(), timeout=120))
    peak = vm_hwm_kb(d) - base
    assert [c.id for c in got if c.id in ids] == [c.id for c in got]
    assert {c.id for c in got} == ids and len(got) == len(ids)
    assert chunks >= 2 and len(got) / chunks <= 256
    # with a filter: every second one
    half, _ = streamed(rs.StreamContainers(pb.StreamContainersRequest(
        filter=pb.ContainerFilter(label_selector={"half": "1"})), timeout=120))
    assert len(half) == EXITED // 2
    if not d.sanitized():
        # the list is over 16 MiB; the daemon held a few chunks of it
        assert peak < 8 << 10, f"peak RSS {peak} kB over {base} kB while streaming"
    # the unary answer passes the limit (and the daemon says so)
    with pytest.raises(grpc.RpcError) as e:
        rs.ListContainers(pb.ListContainersRequest(), timeout=120)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value


def test_client_gone_mid_stream_leaves_nothing(env, many_exited):
    pb = env.pb
    d = env.d
    _, ids = many_exited
    # a first stream, read to its end, warms what a stream allocates for good
    streamed(stub(env).StreamContainers(pb.StreamContainersRequest(), timeout=120))
    fds = d.settled_fds()
    rss = d.rss_kb()
    # (each one leaked would hold a chunk: 20 of them pass the margin)
    for _ in range(20):
        rs = stub(env)
        call = rs.StreamContainers(pb.StreamContainersRequest(), timeout=120)
        first = next(call)
        assert first.containers
        call.cancel()
        del call, rs
    # one that reads a chunk, then removes containers after it (those the
    # daemon's cursor may be at: it is some chunks ahead of the client, and
    # a removal moves it on) while the stream waits, then reads on: each
    # container left is sent once. The removals stay well within the
    # daemon's stall timeout for a client that reads nothing (60 s).
    rs = stub(env)
    call = rs.StreamContainers(pb.StreamContainersRequest(), timeout=120)
    seen = [c.id for c in next(call).containers]
    order = [c.id for c in streamed(stub(env).StreamContainers(
        pb.StreamContainersRequest(), timeout=120))[0]]
    rest_ = order[len(seen):]
    gone = set(rest_[:REMOVED // 2]) | set(rest_[::max(1, len(rest_) // (REMOVED // 2))])
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        list(ex.map(env.remove, gone))
    rest, _ = streamed(call)
    allof = seen + [c.id for c in rest]
    assert len(allof) == len(set(allof))
    assert set(allof) - gone == ids - gone
    del call, rs
    assert d.proc.poll() is None
    wait_for(lambda: d.connections() == 0, timeout=30, what="the connections to close")
    d.wait_fds_back(fds)
    if not d.sanitized():
        assert d.rss_kb() < rss + 2048, f"{rss} kB before, {d.rss_kb()} kB after"


def test_env_cleanup_past_the_message_limit(env):
    """The tests' own clean-up removes every container of a node whose
    unary ListContainers answer passes the message limit, a running one
    too: it streams the lists."""
    pb = env.pb
    pod = env.pod("big")
    cid = env.run(pod, "c", ["/bin/true"])
    env.wait_exited(cid)
    env.kill9()
    n, pad = 180, 100 << 10  # 18 MiB of annotations

    def edit(cfg, i):
        cfg.annotations["pad"] = "x" * pad
    ids = clone_exited(env, cid, n, edit)
    env.restart()
    wait_for(lambda: len(stream_ids(env.rs.StreamContainers(
        pb.StreamContainersRequest(), timeout=60))) == n + 1, timeout=60,
        what="the daemon to recover")
    running = env.run(pod, "r", ["/bin/sleep", "100000"])
    with pytest.raises(grpc.RpcError) as e:
        env.list()
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value
    try:
        env_cleanup(env)  # stops the daemon
    except Exception:
        # the fixture's clean-up then meets a node of ordinary size
        if env.d.proc.poll() is None:
            env.kill9()
        unclone(env, ids)
        env.restart()
        raise
    env.restart()
    assert not stream_ids(env.rs.StreamContainers(pb.StreamContainersRequest(), timeout=60))
    assert not stream_ids(env.rs.StreamPodSandboxes(pb.StreamPodSandboxesRequest(), timeout=60))
    assert running + ".json" not in os.listdir(os.path.join(env.d.root, "containers"))


def test_stats_chunks_bounded_by_bytes(env):
    """ContainerStats carry the containers' annotations (up to 512 KiB a
    config): 40 containers of 430 KiB each, two in each of 20 pods, are more
    than one 16 MiB message, so the chunks of StreamContainerStats and
    StreamPodSandboxStats are bounded by their size, not only by their
    count."""
    pb = env.pb
    ids, pods = [], []
    try:
        for p in range(20):
            pod = env.pod(f"p{p}", net=pb.NODE)
            pods.append(pod[0])
            for i in range(2):
                cfg = env.config(f"big{i}", command=["sleep", "100000"],
                                 annotations={"pad": f"{p:02d}{i}" + "x" * (430 << 10)})
                ids.append(env.create(pod, None, cfg))
        rs = stub(env)
        got, chunks = streamed(rs.StreamContainerStats(pb.StreamContainerStatsRequest(),
                                                       timeout=120))
        assert sorted(s.attributes.id for s in got) == sorted(ids)
        assert chunks >= 2
        for s in got:
            assert len(s.attributes.annotations["pad"]) == 3 + (430 << 10)
        got, chunks = streamed(rs.StreamPodSandboxStats(pb.StreamPodSandboxStatsRequest(),
                                                        timeout=120))
        assert sorted(s.attributes.id for s in got) == sorted(pods)
        assert chunks >= 2
        assert sorted(c.attributes.id for s in got for c in s.linux.containers) == sorted(ids)
    finally:
        # by id: the unary ListContainers of these passes 16 MiB
        for cid in ids:
            env.remove(cid)
