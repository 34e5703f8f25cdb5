"""ExecSync on a cgroup2 mounted with nsdelegate (systemd's default): the
command runs in the container's cgroup, under its device filter, and a
container at its pids.max gets its exec refused, never run elsewhere.
tests/vm/run-cgroup-tests runs it (in its VM where the host lacks
controllers); kept to one container, as the VM's CPU is emulated."""
import os

import grpc
import pytest

from .conftest import vm_marks, wait_for

pytestmark = vm_marks({"pids"})


@pytest.fixture
def nsdelegate():
    """cgroup2 at /sys/fs/cgroup remounted with nsdelegate, its options put
    back afterwards."""
    with open("/proc/self/mountinfo") as f:
        line = next(ln for ln in f if ln.split()[4] == "/sys/fs/cgroup"
                    and " - cgroup2 " in ln)
    opts = line.split(" - ")[1].split()[2]
    if "nsdelegate" not in opts:
        os.system("mount -o remount,nsdelegate /sys/fs/cgroup")
    with open("/proc/self/mountinfo") as f:
        assert any("nsdelegate" in ln for ln in f if ln.split()[4] == "/sys/fs/cgroup")
    yield
    if "nsdelegate" not in opts:
        os.system("mount -o remount,%s /sys/fs/cgroup" % opts.replace("rw,", "", 1))


def exec_sync(env, cid, cmd):
    return env.rs.ExecSync(env.pb.ExecSyncRequest(container_id=cid, cmd=cmd), timeout=120)


def test_exec_under_nsdelegate_and_at_pids_max(nsdelegate, env):
    pb = env.pb
    pod = env.pod()
    # a device node the container makes; forks held until /go is
    # written, then as many as pids.max allows
    # (a fork that fails would end the shell: exactly pids.max of them)
    script = ("mknod /dev/kmsg2 c 1 11 && mkfifo /go && read x < /go; i=1; "
              "while [ $i -lt 6 ]; do sleep 100000 & i=$((i + 1)); done; exec sleep 100000")
    cid = env.run(pod, "full", ["/bin/sh", "-c", script],
                  linux=pb.LinuxContainerConfig(resources=pb.LinuxContainerResources(
                      unified={"pids.max": "6"})))
    cg = env.cgroup_dir(cid)
    wait_for(lambda: exec_sync(env, cid, ["/bin/ls", "/go"]).exit_code == 0,
             what="the container's fifo", timeout=60)
    # in the container's cgroup (the root of its cgroup namespace, not
    # `0::/..` above it), as its own process is
    r = exec_sync(env, cid, ["/bin/sh", "-c", "grep '^0::' /proc/self/cgroup /proc/1/cgroup"])
    assert r.stdout == b"/proc/self/cgroup:0::/\n/proc/1/cgroup:0::/\n", r
    # and under its device filter: the node it made cannot be opened
    r = exec_sync(env, cid, ["/bin/sh", "-c", ": > /dev/kmsg2"])
    assert r.exit_code != 0 and b"Operation not permitted" in r.stderr, r
    # fill pids.max from inside: released through the fifo from here (an
    # exec would hold a pid of its own while the container forks)
    procs = open(os.path.join(cg, "cgroup.procs")).read().split()
    assert len(procs) == 1, procs
    init = procs[0]
    with open(f"/proc/{init}/root/go", "w") as f:
        f.write("\n")
    with open(os.path.join(cg, "pids.max")) as f:
        limit = int(f.read())
    wait_for(lambda: open(f"/proc/{init}/cmdline", "rb").read() == b"sleep\x00100000\x00",
             what="the container's forks done", timeout=60)
    assert int(open(os.path.join(cg, "pids.current")).read()) == limit
    with pytest.raises(grpc.RpcError) as e:
        exec_sync(env, cid, ["/bin/touch", "/ran"])
    assert "pids.max" in e.value.details() and cg in e.value.details(), e.value.details()
    # nothing ran, here or anywhere else
    with open(os.path.join(cg, "pids.max"), "w") as f:
        f.write("max")
    r = exec_sync(env, cid, ["/bin/ls", "/ran"])
    assert r.exit_code != 0, r
