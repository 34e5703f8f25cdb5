"""SIGKILL of the daemon: containers keep running, their exits are recorded
while it is down, half-done creations are cleaned up."""
import os
import signal

from .conftest import wait_for


def test_sigkill_keeps_containers(env):
    pb = env.pb
    pod = env.pod()
    run = env.run(pod, "runs", ["/bin/sleep", "1000"])
    quits = env.run(pod, "quits", ["/bin/sleep", "1000"])
    done = env.run(pod, "done", ["/bin/sh", "-c", "exit 4"])
    created = env.create(pod, None, env.config("created", command=["/bin/true"]))
    env.wait_exited(done)
    env.wait_procs(quits, 1)
    procs = open(env.cgroup_dir(quits) + "/cgroup.procs").read().split()
    env.kill9_restart()
    # while it was down: nothing; now the state is as before
    assert env.status(run).status.state == pb.CONTAINER_RUNNING
    assert env.status(created).status.state == pb.CONTAINER_CREATED
    st = env.status(done).status
    assert st.state == pb.CONTAINER_EXITED and st.exit_code == 4
    # an exit while the daemon is down is recorded by the monitor
    env.d.proc.send_signal(signal.SIGKILL)
    env.d.proc.wait()
    env.d.log.close()
    for p in procs:
        os.kill(int(p), signal.SIGKILL)
    env.d.start()
    env.kill9_restart()
    st = env.status(quits).status
    assert st.state == pb.CONTAINER_EXITED and st.exit_code == 137
    assert st.finished_at > st.started_at
    # and the daemon watches what still runs: a stop works
    env.stop(run, timeout=0)
    assert env.status(run).status.exit_code == 137
    env.start(created)
    env.wait_exited(created)
    assert env.status(created).status.exit_code == 0
    for c in env.list():
        env.remove(c.id)
    assert not env.list()
