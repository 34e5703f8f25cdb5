"""create/start/state/kill/delete/run/list, for kinglet and crun alike."""
import json
import os
import signal
import subprocess

import pytest

from ocihelpers import *  # noqa: F401,F403 (fixtures)
from waiting import wait_for


def test_run_returns_exit_status(runtime, make_bundle, cid):
    b = make_bundle(["sh", "-c", "echo out; echo err >&2; exit 7"])
    r = runtime("run", "--bundle", b, cid)
    assert r.returncode == 7, r.stderr
    assert r.stdout == "out\n"
    assert "err" in r.stderr


def no_pidns(cfg):
    cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"] if n["type"] != "pid"]


def test_run_killed_by_signal_is_128_plus(runtime, make_bundle, cid):
    # Without a pid namespace of its own the shell is not an init that
    # ignores SIGKILL from inside.
    b = make_bundle(["sh", "-c", "kill -9 $$"], edit=no_pidns)
    r = runtime("run", "--bundle", b, cid)
    assert r.returncode == 137, r.stderr


def test_run_removes_the_container(runtime, make_bundle, cid):
    b = make_bundle(["true"])
    runtime("run", "--bundle", b, cid, check=True)
    assert runtime("state", cid).returncode != 0
    assert not (runtime.root / cid).exists()


def test_create_start_kill_delete(runtime, make_bundle, cid, tmp_path):
    b = make_bundle(["sleep", "1000"])
    with open(tmp_path / "out", "w") as out:
        runtime("create", "--bundle", b, cid, stdout=out, stderr=out, check=True)
    st = runtime.state(cid)
    assert st["status"] == "created"
    assert st["id"] == cid
    assert st["bundle"] == str(b)
    pid = st["pid"]
    assert pid > 0
    # Not running the user's process yet: the init waits.
    assert open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0] != b"sleep"
    runtime("start", cid, check=True)
    st = runtime.wait_status(cid, "running")
    wait_for(lambda: open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0] == b"sleep",
             what="the init to exec sleep")
    assert runtime("start", cid).returncode != 0  # only once
    assert runtime("delete", cid).returncode != 0  # running: needs --force
    runtime("kill", cid, "KILL", check=True)
    runtime.wait_status(cid, "stopped")
    runtime("delete", cid, check=True)
    assert runtime("state", cid).returncode != 0
    assert not os.path.exists(f"/proc/{pid}/cmdline") or \
        open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0] != b"sleep"


def test_kill_sigterm_by_name(runtime, make_bundle, cid, tmp_path):
    # The shell says "ready" once its trap is in place; run (in the
    # foreground) exits with the container's status: the trap's 3, not a
    # death by SIGTERM (143).
    b = make_bundle(["sh", "-c", "trap 'exit 3' TERM; echo ready; while true; do sleep 0.05; done"])
    p = subprocess.Popen(runtime.cmd("run", "--bundle", b, cid), stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
    try:
        assert p.stdout.readline() == "ready\n"
        runtime("kill", cid, "SIGTERM", check=True)
        assert p.wait(timeout=60) == 3
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()


def test_delete_force_running(runtime, make_bundle, cid, tmp_path):
    b = make_bundle(["sleep", "1000"])
    with open(tmp_path / "out", "w") as out:
        runtime("run", "--detach", "--bundle", b, cid, stdout=out, stderr=out, check=True)
    pid = runtime.wait_status(cid, "running")["pid"]
    runtime("delete", "--force", cid, check=True)
    wait_for(lambda: pid_gone(pid), what="the container to die of delete --force")


def test_duplicate_id_refused(runtime, make_bundle, cid, tmp_path):
    b = make_bundle(["sleep", "1000"])
    with open(tmp_path / "out", "w") as out:
        runtime("create", "--bundle", b, cid, stdout=out, stderr=out, check=True)
        r = runtime("create", "--bundle", b, cid, stdout=out, stderr=subprocess.PIPE)
    assert r.returncode != 0
    assert runtime.state(cid)["status"] == "created"


def test_list(runtime, make_bundle, cid, tmp_path):
    b = make_bundle(["sleep", "1000"])
    with open(tmp_path / "out", "w") as out:
        runtime("create", "--bundle", b, cid, stdout=out, stderr=out, check=True)
    r = runtime("list", check=True)
    assert cid in r.stdout
    r = runtime("list", "-q", check=True)
    assert r.stdout.split() == [cid]


def test_pid_file(runtime, make_bundle, cid, tmp_path):
    b = make_bundle(["sleep", "1000"])
    with open(tmp_path / "out", "w") as out:
        runtime("create", "--bundle", b, "--pid-file", tmp_path / "pid", cid, stdout=out,
                stderr=out, check=True)
    assert int((tmp_path / "pid").read_text()) == runtime.state(cid)["pid"]


def test_state_of_missing_container_fails(runtime, cid):
    r = runtime("state", cid)
    assert r.returncode != 0
    if runtime.name == "runc":  # says only "container does not exist"
        assert "does not exist" in r.stderr, r.stderr
    else:
        assert cid in r.stderr


def test_exit_record_kept_after_stop(kinglet, make_bundle, cid, tmp_path):
    b = make_bundle(["sh", "-c", "exit 5"])
    with open(tmp_path / "out", "w") as out:
        kinglet("create", "--bundle", b, cid, stdout=out, stderr=out, check=True)
    kinglet("start", cid, check=True)
    st = kinglet.wait_status(cid, "stopped")
    assert st["exitCode"] == 5
    assert st["started"] <= st["finished"]
    rec = json.loads((kinglet.root / cid / "exit.json").read_text())
    assert rec["exitCode"] == 5 and rec["signal"] == 0
    kinglet("delete", cid, check=True)


def test_run_forwards_signals(kinglet, make_bundle, cid):
    b = make_bundle(["sh", "-c", "trap 'exit 42' TERM; echo ready; while true; do sleep 0.05; done"])
    p = subprocess.Popen(kinglet.cmd("run", "--bundle", b, cid), stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 42


def test_delete_created_container_without_force(runtime, make_bundle, cid, tmp_path):
    b = make_bundle(["sleep", "1000"])
    with open(tmp_path / "out", "w") as out:
        runtime("create", "--bundle", b, cid, stdout=out, stderr=out, check=True)
    pid = runtime.state(cid)["pid"]
    runtime("delete", cid, check=True)  # never started: nothing to stop first
    assert runtime("state", cid).returncode != 0
    wait_for(lambda: pid_gone(pid), what="the created init to die of delete")
