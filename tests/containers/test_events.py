"""GetContainerEvents: every subscriber gets the lifecycle in order, with the
pod's status and its containers'."""
import threading

from .conftest import wait_for


def collect(env, out, ready):
    pb = env.pb
    stream = env.rs.GetContainerEvents(pb.GetEventsRequest(), timeout=60)
    ready.set()
    try:
        for ev in stream:
            out.append(ev)
            if ev.container_event_type == pb.CONTAINER_DELETED_EVENT:
                break
    finally:
        stream.cancel()


def test_events_in_order_to_every_subscriber(env):
    pb = env.pb
    subs = [([], threading.Event()) for _ in range(2)]
    threads = [threading.Thread(target=collect, args=(env, out, ready), daemon=True)
               for out, ready in subs]
    for t in threads:
        t.start()
    for _, ready in subs:
        ready.wait(10)
    # the streams are open once the daemon counts them (its debug log)
    wait_for(lambda: "event subscriber added (2 now)" in env.d.logtext(),
             what="two event subscribers")
    pod = env.pod()
    cid = env.run(pod, "ev", ["/bin/sh", "-c", "exit 0"])
    env.wait_exited(cid)
    env.remove(cid)
    for t in threads:
        t.join(30)
    want = [pb.CONTAINER_CREATED_EVENT, pb.CONTAINER_STARTED_EVENT, pb.CONTAINER_STOPPED_EVENT,
            pb.CONTAINER_DELETED_EVENT]
    for out, _ in subs:
        mine = [e for e in out if e.container_id == cid]
        assert [e.container_event_type for e in mine] == want
        for e in mine:
            assert e.pod_sandbox_status.id == pod[0]
            assert e.pod_sandbox_status.state == pb.SANDBOX_READY
            assert [s.id for s in e.containers_statuses] == [cid]
        assert mine[2].containers_statuses[0].state == pb.CONTAINER_EXITED
        assert mine[1].created_at <= mine[2].created_at


def test_containers_that_exit_at_once_are_reported_in_order(env):
    """A container that exits as soon as it starts: its exit must not
    overtake its start. 50 of them, created and started back to back; two
    subscribers each see CREATED, STARTED, STOPPED, DELETED for every one,
    each event with the state it announces, and both in the same order."""
    pb = env.pb
    n = 50
    subs = []
    for _ in range(2):
        stream = env.rs.GetContainerEvents(pb.GetEventsRequest(), timeout=600)
        out = []

        def read(stream=stream, out=out):
            try:
                for ev in stream:
                    out.append(ev)
            except Exception:  # cancelled at the end
                pass
        t = threading.Thread(target=read, daemon=True)
        t.start()
        subs.append((stream, out, t))
    try:
        wait_for(lambda: "event subscriber added (2 now)" in env.d.logtext(),
                 what="two event subscribers")
        pod = env.pod()
        cids = [env.run(pod, f"quick{i}", ["/bin/true"]) for i in range(n)]
        for cid in cids:
            env.wait_exited(cid, timeout=120)
            env.remove(cid)

        def all_deleted(out):
            return sum(e.container_event_type == pb.CONTAINER_DELETED_EVENT for e in out) >= n
        wait_for(lambda: all(all_deleted(out) for _, out, _ in subs), timeout=120,
                 what="every DELETED event at both subscribers")
    finally:
        for stream, _, t in subs:
            stream.cancel()
            t.join(30)
    want = [pb.CONTAINER_CREATED_EVENT, pb.CONTAINER_STARTED_EVENT, pb.CONTAINER_STOPPED_EVENT,
            pb.CONTAINER_DELETED_EVENT]
    states = [pb.CONTAINER_CREATED, pb.CONTAINER_RUNNING, pb.CONTAINER_EXITED,
              pb.CONTAINER_EXITED]
    name = pb.ContainerEventType.Name
    bad = []
    for cid in cids:
        for _, out, _ in subs:
            mine = [e for e in out if e.container_id == cid]
            got = [e.container_event_type for e in mine]
            if got != want:
                bad.append((cid[:12], [name(t) for t in got]))
                continue
            for e, state in zip(mine, states):
                st = [s for s in e.containers_statuses if s.id == cid]
                assert [s.state for s in st] == [state], (cid[:12], name(e.container_event_type))
    assert not bad, f"{len(bad)} of {2 * n} sequences out of order, e.g. {bad[:3]}"
    seqs = [[(e.container_id, e.container_event_type) for e in out] for _, out, _ in subs]
    assert seqs[0] == seqs[1]
