"""Bad input gives one clear line naming the field, and leaves nothing
behind; the monitor is small, detached and keeps the exit status."""
import json
import os
import shutil
import subprocess

import pytest

from ocihelpers import *  # noqa: F401,F403 (fixtures)
from waiting import wait_for


def one_line_error(r, *needles):
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize("edit,field", [
    (lambda c: c["process"].pop("args"), "`process.args`"),
    (lambda c: c["process"].__setitem__("cwd", "relative"), "`process.cwd`"),
    (lambda c: c["mounts"][0].__setitem__("destination", "proc"), "`mounts[0].destination`"),
    (lambda c: c["process"]["capabilities"]["bounding"].__setitem__(0, "CAP_NOPE"),
     "`process.capabilities.bounding[0]`"),
    (lambda c: c["linux"]["namespaces"].append({"type": "bogus"}), "`linux.namespaces[6].type`"),
    (lambda c: c["process"]["rlimits"].append({"type": "RLIMIT_BOGUS", "soft": 1, "hard": 1}),
     "`process.rlimits[1].type`"),
    (lambda c: c["process"].__setitem__("oomScoreAdj", 5000), "`process.oomScoreAdj`"),
    (lambda c: c["linux"].__setitem__("uidMappings", [{"containerID": 0}]),
     "`linux.uidMappings[0]`"),
    (lambda c: c.__setitem__("ociVersion", "2.0.0"), "`ociVersion`"),
    (lambda c: c["mounts"].append({"destination": "/x", "type": "bind"}),
     "`mounts[7].source`"),
    (lambda c: c["linux"].__setitem__("devices", [{"path": "/dev/x", "type": "q"}]),
     "`linux.devices[0].type`"),
])
def test_spec_errors_name_the_field(kinglet, make_bundle, cid, edit, field):
    b = make_bundle(["true"], edit=edit)
    r = kinglet("create", "--bundle", b, cid)
    one_line_error(r, field, str(b / "config.json"))
    assert not (kinglet.root / cid).exists()


def test_malformed_json(kinglet, tmp_path, cid):
    (tmp_path / "config.json").write_text('{"ociVersion": "1.0.2",,}')
    r = kinglet("create", "--bundle", tmp_path, cid)
    one_line_error(r, "line 1")


def test_missing_bundle(kinglet, tmp_path, cid):
    r = kinglet("create", "--bundle", tmp_path / "nope", cid)
    one_line_error(r, "nope")


def test_bad_id(kinglet, make_bundle):
    b = make_bundle(["true"])
    r = kinglet("create", "--bundle", b, "../evil")
    one_line_error(r, "container id")


def test_setup_failure_in_the_init_is_reported_and_cleaned(kinglet, make_bundle, cid, tmp_path):
    def edit(c):
        c["mounts"].append({"destination": "/data", "type": "bind",
                            "source": str(tmp_path / "missing"), "options": ["rbind"]})
        c["linux"]["cgroupsPath"] = f"{RUN_CGROUP}/{cid}"
    b = make_bundle(["true"], edit=edit)
    root = cgroup2_root()
    assert root and os.path.exists(f"{root}/cgroup.procs"), "no cgroup2 hierarchy"
    r = kinglet("create", "--bundle", b, cid)
    one_line_error(r, "`mounts[7].source`", "missing")
    # The init's message crosses to the creator: the system's text once,
    # at the end, not once per process it went through.
    assert r.stderr.count("No such file or directory") == 1, r.stderr
    assert r.stderr.rstrip().endswith(": No such file or directory"), r.stderr
    assert not (kinglet.root / cid).exists()
    assert not os.path.exists(f"{root}{RUN_CGROUP}/{cid}")


def test_missing_executable_fails_create(runtime, make_bundle, cid):
    b = make_bundle(["/bin/does-not-exist"])
    r = runtime("create", "--bundle", b, cid)
    assert r.returncode != 0
    assert "does-not-exist" in r.stderr


def test_unknown_command_and_signal(kinglet, cid):
    assert kinglet("frobnicate").returncode != 0
    r = kinglet("kill", cid, "SIGNOPE")
    one_line_error(r, "SIGNOPE")


def start(kinglet, make_bundle, cid, tmp_path, args=("sleep", "1000")):
    b = make_bundle(list(args))
    with open(tmp_path / "out", "w") as out:
        kinglet("create", "--bundle", b, cid, stdout=out, stderr=out, check=True)
    kinglet("start", cid, check=True)
    st = json.loads((kinglet.root / cid / "state.json").read_text())
    return st


def vm_rss_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def sanitized(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    return "libasan" in out or "libubsan" in out


def test_monitor_is_small(kinglet, kinglet_bin, make_bundle, cid, tmp_path):
    if sanitized(kinglet_bin):
        pytest.skip("a sanitizer build: ASan's shadow memory is counted in VmRSS")
    st = start(kinglet, make_bundle, cid, tmp_path)
    kinglet.wait_status(cid, "running")
    # The monitor sheds its memory once the container has run for 100 ms.
    rss = []

    def small():
        rss.append(vm_rss_kb(st["monitor"]))
        return rss[-1] < 1024
    try:
        wait_for(small, interval=0.05, what="the monitor's VmRSS under 1024 kB")
    finally:
        print(f"monitor VmRSS {rss[-1] if rss else '?'} kB")
    # And it still works: the exit is recorded.
    kinglet("kill", cid, "KILL", check=True)
    assert kinglet.wait_status(cid, "stopped")["exitCode"] == 137


def test_monitor_is_the_detached_parent(kinglet, kinglet_bin, make_bundle, cid, tmp_path):
    st = start(kinglet, make_bundle, cid, tmp_path)
    mon, init = st["monitor"], st["pid"]
    stat = open(f"/proc/{init}/stat").read().rsplit(")", 1)[1].split()
    assert int(stat[1]) == mon  # ppid
    mstat = open(f"/proc/{mon}/stat").read().rsplit(")", 1)[1].split()
    assert int(mstat[3]) == mon  # session leader: no terminal signals from the caller
    assert int(mstat[1]) != os.getpid()
    # It holds none of the caller's files: its stdio is /dev/null. A
    # sanitizer build's monitor writes its reports on fd 2, to the test
    # run's report file (tests/conftest.py), which is none of the caller's.
    for fd in ("0", "1"):
        assert os.readlink(f"/proc/{mon}/fd/{fd}") == "/dev/null"
    stderr = {"/dev/null"}
    if sanitized(kinglet_bin):
        stderr.add(os.environ["KINGLET_MONITOR_REPORT"])
    assert os.readlink(f"/proc/{mon}/fd/2") in stderr
    assert str(tmp_path / "out") not in fd_targets(mon)


def fd_targets(pid):
    """What pid's open files name. The monitor opens and closes files
    of its own (the state directory, its exit record) at any moment, so
    an fd listed may be gone by the time it is read."""
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:
            pass
    return targets


def test_monitor_records_exit_after_the_caller_is_gone(kinglet, make_bundle, cid, tmp_path):
    st = start(kinglet, make_bundle, cid, tmp_path, args=("sh", "-c", "sleep 0.3; exit 4"))
    # The creating and starting processes have exited; the monitor writes
    # the record, durably, then exits.
    rec = kinglet.root / cid / "exit.json"
    wait_for(rec.exists, what="the monitor's exit record")
    data = json.loads(rec.read_text())
    assert data["exitCode"] == 4 and data["started"] > 0 and data["finished"] >= data["started"]
    wait_for(lambda: pid_gone(st["monitor"]), what="the monitor to exit")


def test_the_binary_is_out_of_reach_during_setup(kinglet, make_bundle, cid, tmp_path):
    # While the init waits for start it is still the kinglet binary: it
    # is not dumpable, so a container process cannot open its exe.
    b = make_bundle(["sleep", "1000"])
    with open(tmp_path / "out", "w") as out:
        kinglet("create", "--bundle", b, cid, stdout=out, stderr=out, check=True)
    r = kinglet("exec", cid, "sh", "-c", "cat /proc/1/exe > /dev/null && echo readable; "
                "readlink /proc/1/exe || echo denied")
    assert "readable" not in r.stdout
    assert "denied" in r.stdout


def test_spec_and_features(kinglet, tmp_path, rootfs, cid):
    r = kinglet("spec", "--bundle", tmp_path, check=True)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["process"]["args"] == ["sh"]
    assert kinglet("spec", "--bundle", tmp_path).returncode != 0  # no overwrite
    cfg["root"]["path"] = str(rootfs)
    cfg["process"]["args"] = ["sh", "-c", "exit 3"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert kinglet("run", "--bundle", tmp_path, cid).returncode == 3
    f = json.loads(kinglet("features", check=True).stdout)
    assert "CAP_SYS_ADMIN" in f["linux"]["capabilities"]
    assert "time" in f["linux"]["namespaces"]
    assert "rbind" in f["mountOptions"]


@pytest.mark.parametrize("reference", ["runc", "crun"])
def test_spec_mounts_match_reference(kinglet, tmp_path, rootfs, cid, reference):
    """`kinglet oci spec` mounts what runc's and crun's default specs mount,
    /sys/fs/cgroup included, and a container of that spec sees its cgroup
    there, read-only."""
    if not shutil.which(reference):
        pytest.skip(f"{reference} (Debian package) not installed: no reference spec")
    ours_dir, ref_dir = tmp_path / "ours", tmp_path / "ref"
    ours_dir.mkdir()
    ref_dir.mkdir()
    kinglet("spec", "--bundle", ours_dir, check=True)
    subprocess.run([reference, "spec"], cwd=ref_dir, check=True, timeout=30)
    ours = json.loads((ours_dir / "config.json").read_text())
    ref = json.loads((ref_dir / "config.json").read_text())
    assert [(m["destination"], m["type"]) for m in ours["mounts"]] == \
        [(m["destination"], m["type"]) for m in ref["mounts"]]
    cg = next(m for m in ours["mounts"] if m["destination"] == "/sys/fs/cgroup")
    assert "ro" in cg["options"]

    ours["root"]["path"] = str(rootfs)
    ours["process"]["args"] = ["sh", "-c", "grep ' /sys/fs/cgroup ' /proc/self/mountinfo; "
                               "touch /sys/fs/cgroup/x 2>/dev/null && echo writable; exit 0"]
    (ours_dir / "config.json").write_text(json.dumps(ours))
    r = kinglet("run", "--bundle", ours_dir, cid)
    assert r.returncode == 0, r.stderr
    line = r.stdout.splitlines()[0]
    assert " - cgroup2 " in line and " ro," in line, r.stdout
    assert "writable" not in r.stdout


def test_log_file_json(kinglet, cid, tmp_path):
    log = tmp_path / "kinglet.log"
    r = subprocess.run(kinglet.argv[:2] + ["--root", str(kinglet.root), "--log", str(log),
                                           "--log-format", "json", "state", cid],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    lines = log.read_text().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["level"] == "error" and cid in entry["msg"]


def test_the_binary_cannot_be_overwritten_from_the_container(kinglet, kinglet_bin, make_bundle,
                                                             cid, tmp_path):
    # CVE-2019-5736 class: even a container process with CAP_SYS_PTRACE,
    # which may open the waiting init's /proc/1/exe (the kinglet binary),
    # cannot write to it: the init and the monitor are running it.
    import hashlib
    before = hashlib.sha256(open(kinglet_bin, "rb").read()).hexdigest()
    b = make_bundle(["sleep", "1000"])
    with open(tmp_path / "out", "w") as out:
        kinglet("create", "--bundle", b, cid, stdout=out, stderr=out, check=True)
    caps = ["CAP_SYS_PTRACE", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH"]
    proc = {"args": ["sh", "-c", "echo pwned >> /proc/1/exe && echo WROTE; "
                     "head -c 4 /proc/1/exe | grep -q ELF && echo READ"],
            "cwd": "/", "env": ["PATH=/bin"],
            "capabilities": {k: caps for k in ["bounding", "effective", "permitted"]}}
    (tmp_path / "p.json").write_text(json.dumps(proc))
    r = kinglet("exec", "--process", tmp_path / "p.json", cid)
    print(r.stdout, r.stderr)
    assert "WROTE" not in r.stdout, r.stdout
    assert hashlib.sha256(open(kinglet_bin, "rb").read()).hexdigest() == before


def test_create_killed_half_way_is_cleaned_by_delete_force(kinglet, make_bundle, cid, tmp_path):
    # SIGKILL of the creating process while a prestart hook runs: the
    # state says "creating", delete without --force refuses, delete --force
    # removes everything: the init, the monitor, the cgroup, the state.
    hook_pid = tmp_path / "hook.pid"
    script = tmp_path / "hook.sh"
    script.write_text(f"#!/bin/sh\necho $$ > {hook_pid}\nexec sleep 60\n")
    script.chmod(0o755)

    def edit(c):
        c["hooks"] = {"prestart": [{"path": str(script)}]}
        c["linux"]["cgroupsPath"] = f"{RUN_CGROUP}/{cid}"
    b = make_bundle(["true"], edit=edit)
    with open(tmp_path / "out", "w") as out:
        p = subprocess.Popen(kinglet.cmd("create", "--bundle", b, cid), stdout=out, stderr=out)
    try:
        def hook_started():
            assert p.poll() is None, "create exited"
            return hook_pid.exists() and hook_pid.read_text().strip()
        wait_for(hook_started, what="the prestart hook")
        st = json.loads((kinglet.root / cid / "state.json").read_text())
        # The cgroup, where the host mounts cgroup2 (not a hard-coded path).
        root = cgroup2_root()
        assert st["cgroup"] == f"{root}{RUN_CGROUP}/{cid}", st["cgroup"]
        assert os.path.isdir(st["cgroup"])
        p.kill()
        p.wait(timeout=60)
        status = kinglet.state(cid)["status"]
        assert status in ("creating", "stopped")
        # refused while creating; the init may end meanwhile (its creator
        # is gone): a stopped container is deleted without --force
        if status != "creating" or kinglet("delete", cid).returncode != 0:
            kinglet("delete", "--force", cid, check=True)
        assert not (kinglet.root / cid).exists()
        assert not os.path.exists(st["cgroup"])
        for pid in (st["pid"], st["monitor"]):
            wait_for(lambda: pid_gone(pid), what=f"pid {pid} to be killed")
    finally:
        if hook_pid.exists() and hook_pid.read_text().strip():
            try:
                os.kill(int(hook_pid.read_text()), 9)
            except ProcessLookupError:
                pass


def test_container_survives_sigkill_of_run(kinglet, make_bundle, cid, tmp_path):
    # The caller of a foreground run dies (as a daemon might): the
    # container keeps running under its monitor, which still records the
    # exit.
    b = make_bundle(["sh", "-c", "echo up; sleep 1000"])
    with open(tmp_path / "out", "w") as out:
        p = subprocess.Popen(kinglet.cmd("run", "--bundle", b, cid), stdout=out, stderr=out)

    def up():
        assert p.poll() is None, "oci run exited"
        return "up" in (tmp_path / "out").read_text()
    wait_for(up, what="the container's first line")
    p.kill()
    p.wait(timeout=60)
    st = kinglet.state(cid)
    assert st["status"] == "running"
    kinglet("kill", cid, "KILL", check=True)
    st = kinglet.wait_status(cid, "stopped")
    assert st["exitCode"] == 137
