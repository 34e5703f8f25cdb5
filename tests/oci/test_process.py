"""The process spec, checked from inside the container."""
import os
import re

import pytest

from ocihelpers import *  # noqa: F401,F403 (fixtures)


def run_out(runtime, make_bundle, cid, args, edit=None):
    b = make_bundle(args, edit=edit)
    r = runtime("run", "--bundle", b, cid)
    assert r.returncode == 0, f"{runtime.name}: {r.stderr}"
    return r.stdout


def status_field(text, name):
    m = re.search(rf"^{name}:\s*(\S+)", text, re.M)
    assert m, f"{name} missing in {text}"
    return m.group(1)


CAP_CHOWN, CAP_KILL, CAP_NET_BIND_SERVICE, CAP_SETUID, CAP_SETGID = 0, 5, 10, 7, 6


def test_capabilities_all_five_sets(runtime, make_bundle, cid):
    def edit(c):
        c["process"]["capabilities"] = {
            "bounding": ["CAP_CHOWN", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
            "effective": ["CAP_CHOWN", "CAP_KILL"],
            "permitted": ["CAP_CHOWN", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
            "inheritable": ["CAP_KILL", "CAP_NET_BIND_SERVICE"],
            "ambient": ["CAP_NET_BIND_SERVICE"],
        }
    out = run_out(runtime, make_bundle, cid, ["cat", "/proc/self/status"], edit)
    # After execve as root the effective and permitted sets are recomputed
    # from the bounding set... unless the kernel keeps them: check the
    # bounding, inheritable and ambient sets exactly.
    assert int(status_field(out, "CapBnd"), 16) == (1 << CAP_CHOWN) | (1 << CAP_KILL) | (1 << CAP_NET_BIND_SERVICE)
    assert int(status_field(out, "CapInh"), 16) == (1 << CAP_KILL) | (1 << CAP_NET_BIND_SERVICE)
    assert int(status_field(out, "CapAmb"), 16) == 1 << CAP_NET_BIND_SERVICE


def test_capabilities_non_root_user(runtime, make_bundle, cid):
    def edit(c):
        c["process"]["user"] = {"uid": 1000, "gid": 1000}
        c["process"]["capabilities"] = {
            "bounding": ["CAP_CHOWN", "CAP_KILL"],
            "effective": ["CAP_KILL"],
            "permitted": ["CAP_KILL"],
            "inheritable": ["CAP_KILL"],
            "ambient": ["CAP_KILL"],
        }
    out = run_out(runtime, make_bundle, cid, ["cat", "/proc/self/status"], edit)
    assert int(status_field(out, "CapEff"), 16) == 1 << CAP_KILL
    assert int(status_field(out, "CapPrm"), 16) == 1 << CAP_KILL
    assert int(status_field(out, "CapBnd"), 16) == (1 << CAP_CHOWN) | (1 << CAP_KILL)


@pytest.mark.parametrize("nnp", [True, False])
def test_no_new_privileges(runtime, make_bundle, cid, nnp):
    def edit(c):
        c["process"]["noNewPrivileges"] = nnp
    out = run_out(runtime, make_bundle, cid, ["cat", "/proc/self/status"], edit)
    assert status_field(out, "NoNewPrivs") == ("1" if nnp else "0")


def test_user_groups_umask(runtime, make_bundle, cid):
    def edit(c):
        c["process"]["user"] = {"uid": 1234, "gid": 2345, "additionalGids": [3456, 4567],
                                "umask": 0o027}
    out = run_out(runtime, make_bundle, cid,
                  ["sh", "-c", "id -u; id -g; id -G; umask"], edit)
    lines = out.split()
    assert lines[0] == "1234" and lines[1] == "2345"
    assert set(lines[2:-1]) >= {"2345", "3456", "4567"}
    assert lines[-1] == "0027"


def test_env_and_cwd(runtime, make_bundle, cid):
    def edit(c):
        c["process"]["env"] = ["PATH=/bin", "FOO=bar baz"]
        c["process"]["cwd"] = "/tmp/work"
    out = run_out(runtime, make_bundle, cid, ["sh", "-c", 'echo "$FOO"; pwd'], edit)
    assert out.splitlines() == ["bar baz", "/tmp/work"]


def test_rlimits(runtime, make_bundle, cid):
    def edit(c):
        c["process"]["rlimits"] = [{"type": "RLIMIT_NOFILE", "soft": 321, "hard": 654},
                                   {"type": "RLIMIT_NPROC", "soft": 77, "hard": 88}]
    out = run_out(runtime, make_bundle, cid, ["sh", "-c", "ulimit -n; ulimit -Hn; ulimit -u"],
                  edit)
    assert out.split() == ["321", "654", "77"]


def test_hostname_and_domainname(runtime, make_bundle, cid):
    skip_for_runc(runtime, "no `domainname` (runc 1.2)")
    def edit(c):
        c["hostname"] = "box1"
        c["domainname"] = "example.test"
    out = run_out(runtime, make_bundle, cid,
                  ["sh", "-c", "hostname; cat /proc/sys/kernel/domainname"], edit)
    assert out.split() == ["box1", "example.test"]


def test_pid_namespace(runtime, make_bundle, cid):
    out = run_out(runtime, make_bundle, cid, ["sh", "-c", "echo $$; ls /proc | grep -c '^[0-9]'"])
    assert out.split()[0] == "1"


def test_network_namespace_has_only_lo(runtime, make_bundle, cid):
    out = run_out(runtime, make_bundle, cid, ["cat", "/proc/net/dev"])
    ifaces = [l.split(":")[0].strip() for l in out.splitlines()[2:]]
    assert ifaces == ["lo"]


def test_sysctl(runtime, make_bundle, cid):
    def edit(c):
        c["linux"]["sysctl"] = {"net.ipv4.ip_forward": "1", "kernel.shmmni": "1234"}
    out = run_out(runtime, make_bundle, cid,
                  ["sh", "-c", "cat /proc/sys/net/ipv4/ip_forward /proc/sys/kernel/shmmni"], edit)
    assert out.split() == ["1", "1234"]
    assert open("/proc/sys/kernel/shmmni").read().strip() != "1234"


def test_oom_score_adj(runtime, make_bundle, cid):
    def edit(c):
        c["process"]["oomScoreAdj"] = 345
    out = run_out(runtime, make_bundle, cid, ["cat", "/proc/self/oom_score_adj"], edit)
    assert out.strip() == "345"


def test_negative_oom_score_adj_clamped_with_one_warning(kinglet, make_bundle, cid):
    # These machines have no CAP_SYS_RESOURCE: a negative value is clamped
    # to the runtime's own, with one warning, instead of failing.
    own = int(open("/proc/self/oom_score_adj").read())
    with open("/proc/self/status") as f:
        bnd = int(status_field(f.read(), "CapBnd"), 16)
    if bnd & (1 << 24):
        pytest.skip("this host has CAP_SYS_RESOURCE: nothing to clamp")
    b = make_bundle(["cat", "/proc/self/oom_score_adj"],
                    edit=lambda c: c["process"].__setitem__("oomScoreAdj", -999))
    r = kinglet("run", "--bundle", b, cid)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == own
    assert r.stderr.count("oomScoreAdj") == 1, r.stderr


def test_seccomp_errno(runtime, make_bundle, cid):
    def edit(c):
        c["linux"]["seccomp"] = {
            "defaultAction": "SCMP_ACT_ALLOW",
            "architectures": ["SCMP_ARCH_X86_64"],
            "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO",
                          "errnoRet": 1}],
        }
    b = make_bundle(["sh", "-c", "grep Seccomp: /proc/self/status; mkdir /tmp/x && echo made"],
                    edit=edit)
    r = runtime("run", "--bundle", b, cid)
    assert "Seccomp:\t2" in r.stdout
    assert "made" not in r.stdout
    assert "not permitted" in r.stderr


def test_time_namespace_offsets(runtime, make_bundle, cid):
    skip_for_runc(runtime, "no time namespace (runc 1.2)")
    def edit(c):
        c["linux"]["namespaces"].append({"type": "time"})
        c["linux"]["timeOffsets"] = {"boottime": {"secs": 864000, "nanosecs": 0},
                                     "monotonic": {"secs": 7200, "nanosecs": 5}}
    b = make_bundle(["cat", "/proc/uptime"], edit=edit)
    r = runtime("run", "--bundle", b, cid)
    if runtime.name == "crun" and r.returncode != 0:
        pytest.skip(f"crun 1.8.1: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    host_uptime = float(open("/proc/uptime").read().split()[0])
    assert float(r.stdout.split()[0]) >= host_uptime + 864000 - 5


def test_personality_linux32(runtime, make_bundle, cid):
    skip_for_runc(runtime, "no `linux.personality` (runc 1.2)")
    def edit(c):
        c["linux"]["personality"] = {"domain": "LINUX32"}
    out = run_out(runtime, make_bundle, cid, ["uname", "-m"], edit)
    assert out.strip() in ("i686", "i386", "armv8l", "armv7l")


def test_join_namespaces_by_path(runtime, make_bundle, cid, tmp_path):
    # A first container, then a second one that joins its network, uts,
    # ipc and pid namespaces by path instead of creating them.
    first = cid + "a"
    b = make_bundle(["sleep", "1000"])
    with open(tmp_path / "out", "w") as out:
        runtime("run", "--detach", "--bundle", b, first, stdout=out, stderr=out, check=True)
    pid = runtime.wait_status(first, "running")["pid"]

    def edit(c):
        kinds = {"network": "net", "uts": "uts", "ipc": "ipc", "pid": "pid"}
        c["linux"]["namespaces"] = [
            {"type": n["type"], "path": f"/proc/{pid}/ns/{kinds[n['type']]}"}
            if n["type"] in kinds else n for n in c["linux"]["namespaces"]]
        c.pop("hostname")
    out = run_out(runtime, make_bundle, cid, ["sh", "-c", "for n in net uts ipc; do readlink "
                                             "/proc/self/ns/$n; done; hostname; "
                                             "ps -o pid,comm | grep -c sleep"], edit)
    lines = out.split()
    for i, n in enumerate(["net", "uts", "ipc"]):
        assert lines[i] == os.readlink(f"/proc/{pid}/ns/{n}")
    assert lines[3] == "kinglet-test"
    assert lines[4] == "1"  # the first container's sleep is visible: same pid namespace


def test_seccomp_without_no_new_privileges_for_a_user(runtime, make_bundle, cid):
    # Without no_new_privs the filter needs CAP_SYS_ADMIN, which the uid
    # change drops: it must go in before that change, and still hold.
    skip_for_runc(runtime, "panics (nil pointer dereference)")
    def edit(c):
        c["process"]["noNewPrivileges"] = False
        c["process"]["user"] = {"uid": 1000, "gid": 1000}
        c["linux"]["seccomp"] = {
            "defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["getppid"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}],
        }
    b = make_bundle(["sh", "-c", "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status; id -u"],
                    edit=edit)
    r = runtime("run", "--bundle", b, cid)
    assert r.returncode == 0, r.stderr
    assert "Seccomp:\t2" in r.stdout and "NoNewPrivs:\t0" in r.stdout
    assert r.stdout.split()[-1] == "1000"


@pytest.mark.parametrize("new_keyring", [True, False])
def test_session_keyring(runtime, make_bundle, cid, new_keyring):
    # A session keyring of its own, named after the container, unless
    # --no-new-keyring (then the caller's, which is not named so).
    def edit(c):
        c["linux"]["maskedPaths"] = [p for p in c["linux"]["maskedPaths"] if p != "/proc/keys"]
    b = make_bundle(["cat", "/proc/keys"], edit=edit)
    args = ["run", "--bundle", b, cid] if new_keyring else ["run", "--no-new-keyring",
                                                             "--bundle", b, cid]
    r = runtime(*args)
    assert r.returncode == 0, r.stderr
    # crun and kinglet name it after the container, runc `_ses.ID`.
    named = [l for l in r.stdout.splitlines() if f" {cid}:" in l or f" _ses.{cid}:" in l]
    assert bool(named) == new_keyring, r.stdout


def host_apparmor():
    try:
        with open("/sys/module/apparmor/parameters/enabled") as f:
            return f.read().startswith("Y") and os.path.exists("/sys/kernel/security/apparmor")
    except OSError:
        return False


@pytest.mark.skipif(host_apparmor(), reason="the host has AppArmor: tests/oci/test_vm_apparmor.py")
def test_apparmor_profile_without_apparmor(kinglet, make_bundle, cid):
    # asked for and not given is an error, never a process left unconfined
    b = make_bundle(["true"], edit=lambda c: c["process"].update(apparmorProfile="some-profile"))
    r = kinglet("run", "--bundle", b, cid)
    assert r.returncode != 0
    assert "`process.apparmorProfile`: `some-profile`: the host has no AppArmor" in r.stderr, r.stderr
    # a name the kernel could misread is refused before anything runs
    b = make_bundle(["true"], edit=lambda c: c["process"].update(apparmorProfile="a\nb"))
    r = kinglet("run", "--bundle", b, cid + "-2")
    assert r.returncode != 0 and "`process.apparmorProfile`: a control character" in r.stderr, r.stderr
