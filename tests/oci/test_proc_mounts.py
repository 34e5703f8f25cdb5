"""Mounts inside /proc, read-only trees, and the runtime's own writes in /proc.

As runc since CVE-2019-19921: nothing is mounted inside /proc but procfs on
/proc and the few files lxcfs emulates, whether the destination says /proc
or reaches it through a symlink in the image. A read-only path is read-only
all the way down. And the writes the runtime makes in /proc (oomScoreAdj at
exec, sysctls) go through a procfs it checked, never through whatever the
container (or a spec's allowed mount) put on the way (the precondition of
CVE-2025-52881).
"""
import os
import subprocess

import pytest

from ocihelpers import *  # noqa: F401,F403 (fixtures)
from waiting import wait_for


def bind(dest, source, *opts):
    return {"destination": dest, "type": "bind", "source": str(source),
            "options": ["rbind", *opts]}


@pytest.mark.parametrize("dest", ["/proc/sys/kernel", "/proc/1/oom_score_adj",
                                  "/proc/./sys/../sysrq-trigger", "/x/../proc/self/attr"])
def test_mount_inside_proc_is_refused(kinglet, make_bundle, cid, tmp_path, dest):
    src = tmp_path / "src"
    src.mkdir()

    def edit(c):
        c["mounts"].append(bind(dest, src))
    r = kinglet("run", "--bundle", make_bundle(["true"], edit=edit), cid)
    assert r.returncode != 0
    n = 7  # after the base config's seven mounts
    assert f"mounts[{n}].destination" in r.stderr and "inside /proc" in r.stderr, r.stderr


def test_allowed_proc_files_and_proc_itself(kinglet, make_bundle, cid, tmp_path):
    fake = tmp_path / "meminfo"
    fake.write_text("MemTotal: 42 kB\n")

    def edit(c):
        c["mounts"].append(bind("/proc/meminfo", fake, "ro"))
    r = kinglet("run", "--bundle", make_bundle(["cat", "/proc/meminfo"], edit=edit), cid)
    assert r.returncode == 0 and r.stdout == "MemTotal: 42 kB\n", r.stderr


def test_proc_reached_through_an_image_symlink_is_refused(kinglet, make_bundle, private_rootfs,
                                                          cid, tmp_path):
    os.symlink("/proc", private_rootfs / "lnk")
    src = tmp_path / "src"
    src.mkdir()

    def edit(c):
        c["mounts"].append(bind("/lnk/sys/kernel", src))
    r = kinglet("run", "--bundle", make_bundle(["true"], edit=edit, root=private_rootfs), cid)
    assert r.returncode != 0
    assert "mounts[7].destination" in r.stderr and "inside /proc" in r.stderr, r.stderr


def test_only_a_procfs_on_proc(kinglet, make_bundle, cid, tmp_path):
    src = tmp_path / "fakeproc"
    src.mkdir()

    def edit(c):
        c["mounts"].append(bind("/proc", src))
    r = kinglet("run", "--bundle", make_bundle(["true"], edit=edit), cid)
    assert r.returncode != 0 and "not a procfs" in r.stderr, r.stderr

    def tmpfs(c):
        c["mounts"].append({"destination": "/proc", "type": "tmpfs", "source": "tmpfs"})
    r = kinglet("run", "--bundle", make_bundle(["true"], edit=tmpfs), cid + "b")
    assert r.returncode != 0 and "only a procfs" in r.stderr, r.stderr


def test_readonly_path_covers_mounts_below(kinglet, make_bundle, cid, tmp_path):
    top, sub = tmp_path / "top", tmp_path / "sub"
    (top / "sub").mkdir(parents=True)
    sub.mkdir()

    def edit(c):
        c["mounts"] += [bind("/data", top), bind("/data/sub", sub)]
        c["linux"]["readonlyPaths"].append("/data")
    r = kinglet("run", "--bundle", make_bundle(
        ["sh", "-c", "touch /data/sub/x && echo wrote; touch /data/y && echo wrote"],
        edit=edit), cid)
    assert "wrote" not in r.stdout, r.stderr
    assert r.stderr.count("Read-only file system") == 2, r.stderr
    assert os.listdir(sub) == []


def test_readonly_bind_covers_mounts_below(kinglet, make_bundle, cid, tmp_path):
    # A read-only rbind of a host directory with a mount below it: read-only
    # all the way down (the bind is recursive, so is the read-only).
    top = tmp_path / "top"
    (top / "sub").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "kinglet-test-sub", str(top / "sub")], check=True)
    try:
        def edit(c):
            c["mounts"].append(bind("/data", top, "ro"))
        r = kinglet("run", "--bundle", make_bundle(
            ["sh", "-c", "touch /data/sub/x && echo wrote"], edit=edit), cid)
        assert "wrote" not in r.stdout and "Read-only file system" in r.stderr, r.stderr
        assert os.listdir(top / "sub") == []
    finally:
        subprocess.run(["umount", "-l", str(top / "sub")], check=False)


def test_sysctl_write_never_crosses_a_mount(kinglet, make_bundle, cid, tmp_path):
    # ns_last_pid may be mounted over (runc's list, for CRIU): a sysctl
    # write to it must not land in the file bound there.
    host = tmp_path / "host-file"
    host.write_text("untouched\n")

    def edit(c):
        c["mounts"].append(bind("/proc/sys/kernel/ns_last_pid", host))
        c["linux"]["sysctl"] = {"kernel.ns_last_pid": "1000"}
    r = kinglet("run", "--bundle", make_bundle(["true"], edit=edit), cid)
    assert host.read_text() == "untouched\n"
    assert r.returncode != 0 and "linux.sysctl.kernel.ns_last_pid" in r.stderr, r.stderr


def hostile_proc(kinglet, make_bundle, cid, tmp_path, target, sink):
    """A container with CAP_SYS_ADMIN that puts a tmpfs on /proc with
    self/<target> bound to sink (a file of its own procfs, or of /s), then
    waits for /s/go and writes its hostname to /s/result. Returns the /s
    directory."""
    s = tmp_path / "s"
    s.mkdir()
    (s / "sink").write_text("")
    script = ("mkdir /tmp/p2 && mount -t proc proc /tmp/p2 && mount -t tmpfs t /proc && "
              f"mkdir /proc/self && touch /proc/self/{target} && "
              f"mount --bind {sink} /proc/self/{target} && "
              "touch /s/ready; while [ ! -e /s/go ]; do sleep 0.01; done; hostname > /s/result")

    def edit(c):
        c["process"]["oomScoreAdj"] = 321
        for k in ("bounding", "effective", "permitted"):
            c["process"]["capabilities"][k].append("CAP_SYS_ADMIN")
        c["mounts"].append(bind("/s", s))
        c["linux"]["readonlyPaths"] = []
        c["linux"]["maskedPaths"] = []
    kinglet("create", "--bundle", make_bundle(["sh", "-c", script], edit=edit), cid,
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kinglet("start", cid, check=True)
    wait_in(kinglet, cid, lambda: (s / "ready").exists())
    return s


def wait_in(kinglet, cid, cond):
    def met():
        if cond():
            return True
        # a container that met cond and exited at once: asked once more
        assert kinglet.state(cid)["status"] == "running" or cond(), "the container ended"
        return False
    wait_for(met, what="the container's step")


def hostname_after(kinglet, cid, s):
    (s / "go").write_text("")
    r = s / "result"
    wait_in(kinglet, cid, lambda: r.exists() and r.read_text().endswith("\n"))
    return r.read_text()


def test_exec_oom_score_write_is_not_redirected(kinglet, make_bundle, cid, tmp_path):
    # An exec writing its oomScoreAdj in the container's /proc would,
    # through the tmpfs and the bind, set the hostname. It is written
    # through the daemon's /proc, before kinglet-enter joins the
    # container's mounts: the exec runs and the hostname stays.
    # (The exec joins the container's UTS namespace: its hostname only.)
    s = hostile_proc(kinglet, make_bundle, cid, tmp_path, "oom_score_adj",
                     "/tmp/p2/sys/kernel/hostname")
    r = kinglet("exec", cid, "true")
    assert hostname_after(kinglet, cid, s) == "kinglet-test\n"
    assert r.returncode == 0, r.stderr


def test_time_offsets_write_in_a_joined_mount_namespace(kinglet, make_bundle, cid, tmp_path):
    # A container joining that mount namespace with a time namespace of its
    # own writes its offsets in /proc/self/timens_offsets: the hostile one.
    # Bound to a plain file here: a procfs file written by that container's
    # init would act in its namespaces (with the host's UTS namespace, the
    # host's hostname).
    s = hostile_proc(kinglet, make_bundle, cid, tmp_path, "timens_offsets", "/s/sink")
    pid = kinglet.state(cid)["pid"]

    def edit(c):
        c["linux"]["namespaces"] = [{"type": "mount", "path": f"/proc/{pid}/ns/mnt"},
                                    {"type": "time"}, {"type": "uts"}]
        c["linux"]["timeOffsets"] = {"monotonic": {"secs": 7, "nanosecs": 0}}
    r = kinglet("run", "--bundle", make_bundle(["true"], edit=edit), cid + "j")
    assert (s / "sink").read_text() == ""
    assert r.returncode != 0 and "procfs" in r.stderr, r.stderr
