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
