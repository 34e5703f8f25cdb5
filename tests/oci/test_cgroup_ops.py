"""pause/resume, ps, kill --all, update: the container's cgroup through the
cgroup v2 module. On a hybrid host the unified hierarchy has no controllers
but still groups, freezes and kills, so these run here; the resource limits
themselves are tested in the VM (tests/vm)."""
import json
import os
import signal
import subprocess

import pytest

from ocihelpers import *  # noqa: F401,F403 (fixtures)
from waiting import wait_for


@pytest.fixture
def running(runtime, make_bundle, cid, tmp_path):
    def start(args=("sleep", "1000"), edit=None):
        b = make_bundle(list(args), edit=edit)
        with open(tmp_path / "out", "w") as out:
            runtime("run", "--detach", "--bundle", b, cid, stdout=out, stderr=out, check=True)
        return runtime.wait_status(cid, "running")
    return start


def test_container_gets_its_own_cgroup(kinglet, make_bundle, cid, tmp_path):
    root = cgroup2_root()
    if not root:
        pytest.skip("no cgroup2 hierarchy mounted")
    b = make_bundle(["sleep", "1000"],
                    edit=lambda c: c["linux"].__setitem__("cgroupsPath", f"{RUN_CGROUP}/{cid}"))
    with open(tmp_path / "out", "w") as out:
        kinglet("run", "--detach", "--bundle", b, cid, stdout=out, stderr=out, check=True)
    pid = kinglet.state(cid)["pid"]
    assert proc_cgroup(pid) == f"{RUN_CGROUP}/{cid}"
    procs = open(f"{root}{RUN_CGROUP}/{cid}/cgroup.procs").read().split()
    assert str(pid) in procs
    kinglet("delete", "--force", cid, check=True)
    assert not os.path.exists(f"{root}{RUN_CGROUP}/{cid}")


def _held_at_exit(cg_dir):
    """A process of ours in the cgroup at cg_dir, traced so that when it is
    killed it stops at PTRACE_EVENT_EXIT and stays in the cgroup until we
    let it go. Returns (pid, ptrace)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            with open(f"{cg_dir}/cgroup.procs", "w") as f:
                f.write(str(os.getpid()))
            os.write(w, b"x")
            signal.pause()
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"x"
    os.close(r)
    PTRACE_SEIZE, PTRACE_O_TRACEEXIT = 0x4206, 0x40
    assert libc.ptrace(PTRACE_SEIZE, pid, None, PTRACE_O_TRACEEXIT) == 0, ctypes.get_errno()
    return pid, libc


def test_delete_waits_for_the_cgroup_to_empty(kinglet, make_bundle, cid, tmp_path):
    """delete --force kills the cgroup and removes it once cgroup.events says
    it is empty: a process that leaves late (held at its exit by a tracer)
    keeps delete waiting, and its leaving ends the wait."""
    root = cgroup2_root()
    if not root:
        pytest.skip("no cgroup2 hierarchy mounted")
    cg = f"{root}{RUN_CGROUP}/{cid}"
    b = make_bundle(["sleep", "1000"],
                    edit=lambda c: c["linux"].__setitem__("cgroupsPath", f"{RUN_CGROUP}/{cid}"))
    with open(tmp_path / "out", "w") as out:
        kinglet("run", "--detach", "--bundle", b, cid, stdout=out, stderr=out, check=True)
    pid, libc = _held_at_exit(cg)
    held = {}

    def stopped_at_exit():
        p, status = os.waitpid(pid, os.WNOHANG | 0x40000000)  # __WALL
        if p and os.WIFSTOPPED(status) and status >> 16 == 6:  # PTRACE_EVENT_EXIT
            held["yes"] = True
        return held.get("yes", False)
    d = subprocess.Popen(kinglet.cmd("delete", "--force", cid), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        wait_for(stopped_at_exit, what="the cgroup's kill to reach our process")
        # held at its exit, the process is still in the cgroup: delete waits
        assert "populated 1" in open(f"{cg}/cgroup.events").read()
        assert d.poll() is None, d.communicate()
        assert os.path.isdir(cg)
    finally:
        libc.ptrace(17, pid, None, None)  # PTRACE_DETACH: it finishes dying
        os.waitpid(pid, 0)
    out, err = d.communicate(timeout=60)
    assert d.returncode == 0, err
    assert "cgroup" not in err, err
    assert not os.path.exists(cg)


def test_pause_resume(runtime, running, cid):
    st = running()
    pid = st["pid"]
    runtime("pause", cid, check=True)
    assert runtime.state(cid)["status"] == "paused"
    events = f"{cgroup2_root()}{proc_cgroup(pid)}/cgroup.events"
    wait_for(lambda: "frozen 1" in open(events).read(), what="the cgroup to be frozen")
    runtime("resume", cid, check=True)
    assert runtime.state(cid)["status"] == "running"
    assert "frozen 0" in open(events).read()


def test_ps_lists_the_container_processes(runtime, running, cid):
    st = running(args=("sh", "-c", "sleep 1000 & sleep 1000"))

    def pids():
        return json.loads(runtime("ps", "--format", "json", cid, check=True).stdout)
    # busybox sh execs its last command: the init and the background sleep
    # (once the fork is done), never more.
    wait_for(lambda: len(pids()) >= 2, what="the init and the background sleep")
    assert st["pid"] in pids()
    assert len(pids()) == 2


def test_ps_table_runs_ps_with_options(runtime, running, cid):
    if runtime.name == "crun":
        pytest.skip("crun 1.8.1's ps prints only PIDs and takes no ps(1) options (runc does)")
    st = running(args=("sh", "-c", "sleep 1000 & sleep 1001"))

    def json_pids():
        return set(json.loads(runtime("ps", "--format", "json", cid, check=True).stdout))
    # The init execs sleep 1001 after forking sleep 1000: wait for both.
    wait_for(lambda: len(json_pids()) == 2, what="both sleeps")
    pids = json_pids()
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


def test_kill_without_all_signals_only_the_init(runtime, running, cid):
    # The init traps USR1 and keeps waiting; a second process (sleep) dies
    # of USR1. `kill` reaches the init alone, `kill --all` every process
    # of the cgroup: only the latter kills the sleep.
    st = running(args=("sh", "-c", "trap 'echo got > /tmp/usr1' USR1; sleep 1000 & "
                       "while :; do wait; done"))

    def pids():
        return json.loads(runtime("ps", "--format", "json", cid, check=True).stdout)
    wait_for(lambda: len(pids()) == 2, what="the init and its sleep")
    runtime("kill", cid, "USR1", check=True)
    wait_for(lambda: runtime("exec", cid, "test", "-e", "/tmp/usr1").returncode == 0,
             what="the init's trap")
    assert sorted(pids()) == sorted(pids())  # stable
    assert len(pids()) == 2, "kill without --all reached another process"
    runtime("kill", "--all", cid, "USR1", check=True)
    wait_for(lambda: pids() == [st["pid"]], what="the sleep to die of USR1")
    assert runtime.state(cid)["status"] == "running"


def start_kinglet(kinglet, make_bundle, cid, tmp_path):
    b = make_bundle(["sleep", "1000"])
    with open(tmp_path / "out", "w") as out:
        kinglet("run", "--detach", "--bundle", b, cid, stdout=out, stderr=out, check=True)


def test_update_writes_the_values(kinglet, make_bundle, cid, tmp_path):
    start_kinglet(kinglet, make_bundle, cid, tmp_path)
    cg = cgroup2_root() + proc_cgroup(kinglet.state(cid)["pid"])
    # cgroup.max.* exist in every cgroup, controllers or not: the values
    # must land there. pids.max only where the pids controller is on.
    res = {"pids": {"limit": 100},
           "unified": {"cgroup.max.descendants": "7", "cgroup.max.depth": "3"}}
    (tmp_path / "res.json").write_text(json.dumps(res))
    r = kinglet("update", "--resources", tmp_path / "res.json", cid)
    assert r.returncode == 0, r.stderr
    assert open(f"{cg}/cgroup.max.descendants").read().strip() == "7"
    assert open(f"{cg}/cgroup.max.depth").read().strip() == "3"
    if os.path.exists(f"{cg}/pids.max"):
        assert open(f"{cg}/pids.max").read().strip() == "100"
    else:
        # No pids controller (a hybrid host): skipped with a warning that
        # names it, not an error.
        assert "pids" in r.stderr, r.stderr
    # From stdin, a second update changes them again.
    r = kinglet("update", "--resources", "-", cid,
                input=json.dumps({"unified": {"cgroup.max.descendants": "max"}}))
    assert r.returncode == 0, r.stderr
    assert open(f"{cg}/cgroup.max.descendants").read().strip() == "max"
    assert open(f"{cg}/cgroup.max.depth").read().strip() == "3"


def test_unified_cgroup_freeze_is_refused(kinglet, make_bundle, cid, tmp_path):
    # cgroup.freeze in linux.resources.unified froze the init before it
    # ran: `run` hung for good with SIGTERM blocked. Refused, as the other
    # files that are not resources, with a pointer to pause/resume.
    b = make_bundle(["true"], edit=lambda c: c["linux"].setdefault("resources", {})
                    .__setitem__("unified", {"cgroup.freeze": "1"}))
    r = kinglet("run", "--bundle", b, cid, timeout=20)
    assert r.returncode == 1, r.stderr
    assert "`cgroup.freeze` is not a resource" in r.stderr and "pause" in r.stderr, r.stderr
    assert not (kinglet.root / cid).exists()
    start_kinglet(kinglet, make_bundle, cid, tmp_path)
    r = kinglet("update", "--resources", "-", cid,
                input=json.dumps({"unified": {"cgroup.freeze": "1"}}))
    assert r.returncode == 1 and "`cgroup.freeze` is not a resource" in r.stderr, r.stderr
    assert kinglet.state(cid)["status"] == "running"


def run_in_background(kinglet, bundle, cid, tmp_path):
    out = open(tmp_path / "run.out", "w")
    p = subprocess.Popen(kinglet.cmd("run", "--bundle", bundle, cid), stdout=out,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    out.close()
    return p


def test_run_ends_on_sigterm_while_paused(kinglet, make_bundle, cid, tmp_path):
    # A paused container cannot act on the forwarded SIGTERM: run must not
    # wait for it forever. It kills and deletes the container.
    p = run_in_background(kinglet, make_bundle(["sleep", "1000"]), cid, tmp_path)
    try:
        wait_for(lambda: (kinglet.root / cid / "state.json").exists() and
                 kinglet.state(cid)["status"] == "running", what="running")
        pid = kinglet.state(cid)["pid"]
        kinglet("pause", cid, check=True)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 128 + signal.SIGTERM, (tmp_path / "run.out").read_text()
        assert not (kinglet.root / cid).exists()
        wait_for(lambda: not os.path.exists(f"/proc/{pid}"), what="the container to be gone")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_run_stops_creating_on_sigterm(kinglet, make_bundle, cid, tmp_path):
    # The container's cgroup sits below a frozen one: its init freezes in
    # setup and create waits. SIGTERM to run ends the wait promptly and
    # undoes the create.
    root = cgroup2_root()
    parent = f"{root}{RUN_CGROUP}/frozen-{cid}"
    os.makedirs(parent)
    p = None
    try:
        with open(f"{parent}/cgroup.freeze", "w") as f:
            f.write("1")
        b = make_bundle(["true"], edit=lambda c: c["linux"].__setitem__(
            "cgroupsPath", f"{RUN_CGROUP}/frozen-{cid}/{cid}"))
        p = run_in_background(kinglet, b, cid, tmp_path)
        wait_for(lambda: os.path.exists(f"{parent}/{cid}/cgroup.procs") and
                 open(f"{parent}/{cid}/cgroup.procs").read().strip(), what="the init in its cgroup")
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) != 0
        out = (tmp_path / "run.out").read_text()
        assert "interrupted" in out, out
        assert not (kinglet.root / cid).exists()
        assert not os.path.exists(f"{parent}/{cid}")
    finally:
        if p and p.poll() is None:
            p.kill()
            p.wait()
        with open(f"{parent}/cgroup.freeze", "w") as f:
            f.write("0")
        child = f"{parent}/{cid}"
        if os.path.isdir(child):
            for pid in open(f"{child}/cgroup.procs").read().split():
                os.kill(int(pid), signal.SIGKILL)
            wait_for(lambda: not open(f"{child}/cgroup.procs").read().strip(), what="cleanup")
            os.rmdir(child)
        kinglet("delete", "--force", cid)
        os.rmdir(parent)


def test_update_rejects_bad_json(kinglet, make_bundle, cid, tmp_path):
    start_kinglet(kinglet, make_bundle, cid, tmp_path)
    (tmp_path / "res.json").write_text("{nope")
    r = kinglet("update", "--resources", tmp_path / "res.json", cid)
    assert r.returncode != 0
    assert "resources" in r.stderr


def test_run_stops_a_hook_on_sigterm(kinglet, make_bundle, cid, tmp_path):
    # A prestart hook without a timeout that never ends: SIGTERM to run
    # kills it, undoes the create and ends run promptly.
    hook_pid = tmp_path / "hook.pid"
    script = tmp_path / "hook.sh"
    script.write_text(f"#!/bin/sh\necho $$ > {hook_pid}\nexec sleep 1000\n")
    script.chmod(0o755)
    b = make_bundle(["true"], edit=lambda c: c.__setitem__(
        "hooks", {"prestart": [{"path": str(script)}]}))
    p = run_in_background(kinglet, b, cid, tmp_path)
    pid = None
    try:
        wait_for(lambda: hook_pid.exists() and hook_pid.read_text().strip(), what="the hook")
        pid = int(hook_pid.read_text())
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) != 0
        out = (tmp_path / "run.out").read_text()
        assert "interrupted" in out and "hooks.prestart[0]" in out, out
        assert not (kinglet.root / cid).exists()
        wait_for(lambda: pid_gone(pid), what="the hook to be killed")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if pid and os.path.exists(f"/proc/{pid}"):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize("n", [24, 1024])
def test_many_device_rules(kinglet, make_bundle, cid, n):
    # Each of these rules emits the most instructions (type, access, major,
    # minor): 24 of them overflowed the device program's buffer, 1,024 (the
    # most accepted) by 8 KB; the ASan build of the suite aborts on that.
    # The program is built and loaded; the rules and the defaults decide.
    rule = {"allow": True, "type": "c", "major": 1, "minor": 1, "access": "r"}

    def edit(c):
        c["linux"]["resources"] = {"devices": [dict(rule) for _ in range(n)]}
    b = make_bundle(["sh", "-c", "echo ok > /dev/null && echo null-ok"], edit=edit)
    r = kinglet("run", "--bundle", b, cid)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["null-ok"], r.stderr
    assert "AddressSanitizer" not in r.stderr
    # One more than the limit is refused, naming it.
    def edit_over(c):
        c["linux"]["resources"] = {"devices": [dict(rule) for _ in range(1025)]}
    r = kinglet("run", "--bundle", make_bundle(["true"], edit=edit_over), cid)
    assert r.returncode == 1 and "more than 1024 rules" in r.stderr, r.stderr


def test_exec_runs_in_the_cgroup_or_not_at_all(kinglet, make_bundle, cid, tmp_path):
    """kinglet oci exec: the command is cloned into the container's cgroup;
    when that cannot be done (here the cgroup's directory shadowed by a
    tmpfs in a mount namespace of the exec's own) the exec fails naming the
    cgroup and nothing runs: the old code ran it in the caller's cgroup."""
    root = cgroup2_root()
    if not root:
        pytest.skip("no cgroup2 hierarchy mounted")
    b = make_bundle(["sleep", "1000"],
                    edit=lambda c: c["linux"].__setitem__("cgroupsPath", f"{RUN_CGROUP}/{cid}"))
    with open(tmp_path / "out", "w") as out:
        kinglet("run", "--detach", "--bundle", b, cid, stdout=out, stderr=out, check=True)
    try:
        r = kinglet("exec", cid, "sh", "-c", "cat /proc/self/cgroup")
        assert r.returncode == 0, r.stderr
        assert "0::/\n" in r.stdout, r.stdout  # the root of its cgroup namespace
        r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            'mount -t tmpfs -o size=4k x "$1" && shift && exec "$@"', "-",
                            f"{root}{RUN_CGROUP}/{cid}", *kinglet.cmd("exec", cid, "echo",
                                                                      "RAN")],
                           capture_output=True, text=True, timeout=60)
        assert "RAN" not in r.stdout, r.stdout
        assert r.returncode != 0 and "the container's cgroup" in r.stderr, (r.returncode,
                                                                            r.stderr)
        procs = open(f"{root}{RUN_CGROUP}/{cid}/cgroup.procs").read().split()
        assert procs == [str(kinglet.state(cid)["pid"])], procs
    finally:
        kinglet("delete", "--force", cid, check=True)
