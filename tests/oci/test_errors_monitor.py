"""Bad input gives one clear line naming the field, and leaves nothing
behind; the monitor is small, detached and keeps the exit status."""
import json
import os
import subprocess
import time

import pytest


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
        c["linux"]["cgroupsPath"] = f"/kinglet-test/{cid}"
    b = make_bundle(["true"], edit=edit)
    r = kinglet("create", "--bundle", b, cid)
    one_line_error(r, "`mounts[7].source`", "missing")
    assert not (kinglet.root / cid).exists()
    assert not os.path.exists(f"/sys/fs/cgroup/unified/kinglet-test/{cid}")


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
    rss = vm_rss_kb(st["monitor"])
    print(f"monitor VmRSS {rss} kB")
    assert rss < 1024, f"monitor VmRSS {rss} kB"


def test_monitor_is_the_detached_parent(kinglet, make_bundle, cid, tmp_path):
    st = start(kinglet, make_bundle, cid, tmp_path)
    mon, init = st["monitor"], st["pid"]
    stat = open(f"/proc/{init}/stat").read().rsplit(")", 1)[1].split()
    assert int(stat[1]) == mon  # ppid
    mstat = open(f"/proc/{mon}/stat").read().rsplit(")", 1)[1].split()
    assert int(mstat[3]) == mon  # session leader: no terminal signals from the caller
    assert int(mstat[1]) != os.getpid()
    # It holds none of the caller's files: its stdio is /dev/null.
    for fd in ("0", "1", "2"):
        assert os.readlink(f"/proc/{mon}/fd/{fd}") == "/dev/null"
    targets = [os.readlink(f"/proc/{mon}/fd/{fd}") for fd in os.listdir(f"/proc/{mon}/fd")]
    assert str(tmp_path / "out") not in targets


def test_monitor_records_exit_after_the_caller_is_gone(kinglet, make_bundle, cid, tmp_path):
    st = start(kinglet, make_bundle, cid, tmp_path, args=("sh", "-c", "sleep 0.3; exit 4"))
    # The creating and starting processes have exited; the monitor writes
    # the record, durably, then exits.
    deadline = time.monotonic() + 10
    rec = kinglet.root / cid / "exit.json"
    while not rec.exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    data = json.loads(rec.read_text())
    assert data["exitCode"] == 4 and data["started"] > 0 and data["finished"] >= data["started"]
    while os.path.exists(f"/proc/{st['monitor']}"):
        s = open(f"/proc/{st['monitor']}/stat").read().rsplit(")", 1)[1].split()[0]
        if s == "Z":
            break
        assert time.monotonic() < deadline, "monitor did not exit"
        time.sleep(0.02)


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
