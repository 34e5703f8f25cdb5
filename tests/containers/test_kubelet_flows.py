"""What a kubelet does with a runtime, through the same calls it makes
(there is no kubelet in Debian bookworm to drive these tests with): a pod of
two containers sharing an emptyDir and serving it on a host port, exec
probes, a crashing container restarted as a new attempt with its restart
count in its annotations, and the PLEG's every-second relist."""
import os
import time

from .conftest import wait_for

HTTP_GET = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
c.sendall(b"GET /index.html HTTP/1.0\\r\\n\\r\\n")
data = b""
while True:
    b = c.recv(4096)
    if not b:
        break
    data += b
print(data.split(b"\\r\\n\\r\\n", 1)[1].decode().strip())
"""


def test_emptydir_shared_and_served_on_a_host_port(env, tmp_path):
    pb = env.pb
    empty = tmp_path / "emptydir"  # kubelet makes it under /var/lib/kubelet/pods
    pod = env.pod("web", port_mappings=[pb.PortMapping(protocol=pb.TCP, container_port=80,
                                                       host_port=8081)])
    vol = pb.Mount(container_path="/data", host_path=str(empty))
    writer = env.run(pod, "writer", ["/bin/sh", "-c",
                                     "echo hello from $(hostname) > /data/index.html; "
                                     "sleep 1000"], mounts=[vol])
    server = env.run(pod, "server", ["/bin/httpd", "-f", "-p", "80", "-h", "/data"],
                     mounts=[pb.Mount(container_path="/data", host_path=str(empty),
                                      readonly=True)])
    wait_for(lambda: (empty / "index.html").exists(), what="the writer's file")
    # a readiness probe, as kubelet runs it
    probe = env.rs.ExecSync(pb.ExecSyncRequest(container_id=server, timeout=5,
                                               cmd=["/bin/sh", "-c", "test -s /data/index.html"]),
                            timeout=30)
    assert probe.exit_code == 0
    # the read-only mount is read-only in there
    r = env.rs.ExecSync(pb.ExecSyncRequest(container_id=server, timeout=5,
                                           cmd=["/bin/sh", "-c", "echo x > /data/y"]), timeout=30)
    assert r.exit_code != 0 and b"Read-only" in r.stderr
    out = wait_for(lambda: (lambda r: r.stdout.strip() or None)(
        env.d.run("/usr/bin/python3", "-c", HTTP_GET, "127.0.0.1", "8081", check=False)),
        what="the page on the host port")
    assert out == "hello from web"
    assert env.status(writer).status.state == pb.CONTAINER_RUNNING


def test_crash_loop_restarts_as_kubelet_does(env):
    """kubelet restarts a crashed container as attempt+1 and keeps the
    restart count in its annotations; the exited attempt stays listed (with
    its exit code) until kubelet removes it."""
    pb = env.pb
    pod = env.pod("crash")
    ids = []
    for attempt in range(3):
        cfg = env.config("c", command=["/bin/sh", "-c", "echo try; exit 1"], attempt=attempt,
                         annotations={"io.kubernetes.container.restartCount": str(attempt)})
        cid = env.create(pod, None, cfg)
        env.start(cid)
        st = env.wait_exited(cid)
        assert (st.exit_code, st.reason) == (1, "Error")
        ids.append(cid)
    env.kill9_restart()  # what kubelet reads back after a runtime restart
    cs = {c.id: c for c in env.list(pod_sandbox_id=pod[0])}
    assert sorted(cs) == sorted(ids)
    for n, cid in enumerate(ids):
        st = env.status(cid).status
        assert st.metadata.attempt == n
        assert st.annotations["io.kubernetes.container.restartCount"] == str(n)
        assert st.exit_code == 1
    # the old attempts go, the log of each stays for kubelet's rotation
    for cid in ids[:-1]:
        log = env.status(cid).status.log_path
        env.remove(cid)
        assert os.path.exists(log)


def test_pleg_relist_is_fast(env):
    """kubelet lists pods and containers every second: answered from
    memory, well under a millisecond each on a quiet machine."""
    pb = env.pb
    pods = [env.pod(f"l{i}") for i in range(10)]
    for i, p in enumerate(pods):
        env.create(p, None, env.config(f"c{i}", command=["/bin/true"]))
    env.rs.ListContainers(pb.ListContainersRequest(), timeout=10)
    n = 200
    cpu0 = env.d.cpu_seconds()
    for _ in range(n):
        env.rs.ListContainers(pb.ListContainersRequest(), timeout=10)
        env.rs.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10)
    # the daemon's CPU time per list (wall time would count whatever else
    # the machine runs)
    per = (env.d.cpu_seconds() - cpu0) / (2 * n)
    assert per < 0.001, f"{per * 1000:.2f} ms of CPU per list"
    # the daemon's own time per call, from its debug log
    import re
    times = sorted(float(m) for m in re.findall(
        r"rpc /runtime.v1.RuntimeService/ListContainers OK ([0-9.]+)ms", env.d.logtext()))
    assert len(times) >= n
    assert times[len(times) // 2] < 1.0, f"median {times[len(times) // 2]} ms"
