"""pause/resume, ps, kill --all, update: the container's cgroup through the
cgroup v2 module. On a hybrid host the unified hierarchy has no controllers
but still groups, freezes and kills, so these run here; the resource limits
themselves are tested in the VM (tests/vm)."""
import json
import os
import time

import pytest

from ocihelpers import *  # noqa: F401,F403 (fixtures)


def unified_root():
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        sep = f.index("-")
        if f[sep + 1] == "cgroup2":
            return f[4]
    return None


@pytest.fixture
def running(runtime, make_bundle, cid, tmp_path):
    def start(args=("sleep", "1000"), edit=None):
        b = make_bundle(list(args), edit=edit)
        with open(tmp_path / "out", "w") as out:
            runtime("run", "--detach", "--bundle", b, cid, stdout=out, stderr=out, check=True)
        return runtime.wait_status(cid, "running")
    return start


def proc_cgroup(pid):
    for line in open(f"/proc/{pid}/cgroup"):
        if line.startswith("0::"):
            return line[3:].strip()
    return None


def test_container_gets_its_own_cgroup(kinglet, make_bundle, cid, tmp_path):
    root = unified_root()
    if not root:
        pytest.skip("no cgroup2 hierarchy mounted")
    b = make_bundle(["sleep", "1000"],
                    edit=lambda c: c["linux"].__setitem__("cgroupsPath", f"/kinglet-test/{cid}"))
    with open(tmp_path / "out", "w") as out:
        kinglet("run", "--detach", "--bundle", b, cid, stdout=out, stderr=out, check=True)
    pid = kinglet.state(cid)["pid"]
    assert proc_cgroup(pid) == f"/kinglet-test/{cid}"
    procs = open(f"{root}/kinglet-test/{cid}/cgroup.procs").read().split()
    assert str(pid) in procs
    kinglet("delete", "--force", cid, check=True)
    assert not os.path.exists(f"{root}/kinglet-test/{cid}")


def test_pause_resume(runtime, running, cid):
    st = running()
    pid = st["pid"]
    runtime("pause", cid, check=True)
    assert runtime.state(cid)["status"] == "paused"
    deadline = time.monotonic() + 5
    cg = proc_cgroup(pid)
    events = f"{unified_root()}{cg}/cgroup.events"
    while "frozen 1" not in open(events).read():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    runtime("resume", cid, check=True)
    assert runtime.state(cid)["status"] == "running"
    assert "frozen 0" in open(events).read()


def test_ps_lists_the_container_processes(runtime, running, cid):
    st = running(args=("sh", "-c", "sleep 1000 & sleep 1000"))
    r = runtime("ps", "--format", "json", cid, check=True)
    pids = json.loads(r.stdout)
    assert st["pid"] in pids
    # busybox sh execs its last command: the init and the background sleep.
    assert len(pids) == 2


def test_ps_table_runs_ps_with_options(runtime, running, cid):
    if runtime.name == "crun":
        pytest.skip("crun 1.8.1's ps prints only PIDs and takes no ps(1) options (runc does)")
    st = running(args=("sh", "-c", "sleep 1000 & sleep 1001"))
    pids = set(json.loads(runtime("ps", "--format", "json", cid, check=True).stdout))
    # Default: ps -ef, filtered to the container's processes, header kept.
    lines = runtime("ps", cid, check=True).stdout.splitlines()
    assert lines[0].split()[1] == "PID"
    assert {int(l.split()[1]) for l in lines[1:]} == pids
    # ps options after the id, as with runc.
    lines = runtime("ps", cid, "-o", "pid,args", check=True).stdout.splitlines()
    assert lines[0].split() == ["PID", "COMMAND"]
    assert {int(l.split()[0]) for l in lines[1:]} == pids
    assert any("sleep 1001" in l for l in lines[1:])
    assert st["pid"] in pids


def test_kill_all(runtime, running, cid):
    st = running(args=("sh", "-c", "trap '' TERM; sleep 1000 & sleep 1000"))
    runtime("kill", "--all", cid, "KILL", check=True)
    runtime.wait_status(cid, "stopped")


def start_kinglet(kinglet, make_bundle, cid, tmp_path):
    b = make_bundle(["sleep", "1000"])
    with open(tmp_path / "out", "w") as out:
        kinglet("run", "--detach", "--bundle", b, cid, stdout=out, stderr=out, check=True)


def test_update_accepts_resources(kinglet, make_bundle, cid, tmp_path):
    start_kinglet(kinglet, make_bundle, cid, tmp_path)
    (tmp_path / "res.json").write_text(json.dumps({"pids": {"limit": 100}}))
    r = kinglet("update", "--resources", tmp_path / "res.json", cid)
    # On a host without the pids controller the limit is skipped with a
    # warning, not an error.
    assert r.returncode == 0, r.stderr


def test_update_rejects_bad_json(kinglet, make_bundle, cid, tmp_path):
    start_kinglet(kinglet, make_bundle, cid, tmp_path)
    (tmp_path / "res.json").write_text("{nope")
    r = kinglet("update", "--resources", tmp_path / "res.json", cid)
    assert r.returncode != 0
    assert "resources" in r.stderr
