"""Mounts, /dev, masked and read-only paths, the rootfs: from inside."""
import os
import stat
import subprocess
import uuid

import pytest

from ocihelpers import *  # noqa: F401,F403 (fixtures)


def run(runtime, b, cid):
    r = runtime("run", "--bundle", b, cid)
    return r


def mountinfo_line(out, dest):
    for line in out.splitlines():
        f = line.split()
        if len(f) > 4 and f[4] == dest:
            return line
    return None


def test_masked_paths(runtime, make_bundle, cid):
    b = make_bundle(["sh", "-c", "wc -c < /proc/timer_list; ls /sys/firmware | wc -l; "
                     "stat -c %t:%T /proc/timer_list"])
    r = run(runtime, b, cid)
    assert r.returncode == 0, r.stderr
    size, entries, dev = r.stdout.split()
    assert size == "0" and entries == "0"
    assert dev == "1:3"  # the null device


def test_masked_paths_refuse_a_fake_dev_null(runtime, make_bundle, cid):
    # /dev is the image's own here (no tmpfs mount on it), with a regular
    # file at /dev/null: masking must not bind that file.
    def edit(c):
        c["mounts"] = [m for m in c["mounts"] if not m["destination"].startswith("/dev")]
    import shutil, tempfile, json
    b = make_bundle(["true"], edit=edit)
    cfg = json.loads((b / "config.json").read_text())
    root = b / "rootfs"
    shutil.copytree(cfg["root"]["path"], root, symlinks=True)
    (root / "dev" / "null").write_text("not a device\n")
    cfg["root"]["path"] = str(root)
    (b / "config.json").write_text(json.dumps(cfg))
    r = run(runtime, b, cid)
    assert r.returncode != 0
    if runtime.name == "kinglet":
        assert "/dev/null" in r.stderr


def test_readonly_paths(runtime, make_bundle, cid):
    b = make_bundle(["sh", "-c", "echo 1 > /proc/sys/kernel/shmmni && echo wrote"])
    r = run(runtime, b, cid)
    assert "wrote" not in r.stdout
    assert "Read-only" in r.stderr


def test_readonly_root(runtime, make_bundle, cid):
    b = make_bundle(["sh", "-c", "touch /newfile && echo wrote; touch /tmp/ok && echo tmp"])
    r = run(runtime, b, cid)
    assert r.stdout.split() == ["tmp"], r.stderr


def test_writable_root(runtime, make_bundle, private_rootfs, cid):
    def edit(c):
        c["root"]["readonly"] = False
    b = make_bundle(["sh", "-c", "touch /newfile && echo wrote"], edit=edit, root=private_rootfs)
    r = run(runtime, b, cid)
    assert r.stdout.split() == ["wrote"], r.stderr
    assert (private_rootfs / "newfile").exists()


def test_bind_mount_with_options(runtime, make_bundle, cid, tmp_path):
    src = tmp_path / "data"
    src.mkdir()
    (src / "f").write_text("hello\n")

    def edit(c):
        c["mounts"].append({"destination": "/data", "type": "bind", "source": str(src),
                            "options": ["rbind", "ro", "nosuid", "nodev", "noexec"]})
    b = make_bundle(["sh", "-c", "cat /data/f; touch /data/g || echo denied; "
                     "grep ' /data ' /proc/self/mountinfo"], edit=edit)
    r = run(runtime, b, cid)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "hello" and lines[1] == "denied"
    opts = lines[2].split()[5].split(",")
    assert {"ro", "nosuid", "nodev", "noexec"} <= set(opts)
    assert not (src / "g").exists()


def test_bind_mount_file(runtime, make_bundle, cid, tmp_path):
    src = tmp_path / "file.txt"
    src.write_text("one file\n")

    def edit(c):
        c["mounts"].append({"destination": "/etc/hosted", "type": "bind", "source": str(src),
                            "options": ["bind", "ro"]})
    r = run(runtime, make_bundle(["cat", "/etc/hosted"], edit=edit), cid)
    assert r.stdout == "one file\n", r.stderr


def test_tmpfs_size_and_mode(runtime, make_bundle, cid):
    skip_for_runc(runtime, "a tmpfs on a mount point it makes gets mode 755, not mode=")
    def edit(c):
        c["mounts"].append({"destination": "/scratch", "type": "tmpfs", "source": "tmpfs",
                            "options": ["size=1m", "mode=0710", "noexec"]})
    r = run(runtime, make_bundle(["sh", "-c", "stat -c %a /scratch; "
                                  "grep ' /scratch ' /proc/self/mountinfo"], edit=edit), cid)
    assert r.returncode == 0, r.stderr
    mode, info = r.stdout.splitlines()
    assert mode == "710"
    assert "size=1024k" in info and "noexec" in info


def test_mount_propagation_option(runtime, make_bundle, cid, tmp_path):
    src = tmp_path / "shared"
    src.mkdir()

    def edit(c):
        c["mounts"].append({"destination": "/s", "type": "bind", "source": str(src),
                            "options": ["rbind", "rprivate"]})
    r = run(runtime, make_bundle(["grep", " /s ", "/proc/self/mountinfo"], edit=edit), cid)
    assert r.returncode == 0, r.stderr
    fields = r.stdout.split(" - ")[0].split()
    assert not any(f.startswith("shared:") or f.startswith("master:") for f in fields[6:])


def test_tmpfs_with_propagation(runtime, make_bundle, cid):
    # Made detached (fsopen) and its propagation set through its descriptor.
    if runtime.name == "crun":
        pytest.skip("crun 1.8.1 leaves a tmpfs given rshared private")
    def edit(c):
        c["mounts"].append({"destination": "/scratch", "type": "tmpfs", "source": "tmpfs",
                            "options": ["size=1m", "noexec", "rshared"]})
    r = run(runtime, make_bundle(["grep", " /scratch ", "/proc/self/mountinfo"], edit=edit), cid)
    assert r.returncode == 0, r.stderr
    fields, super_ = r.stdout.split(" - ")
    assert "noexec" in fields.split()[5].split(",")
    assert any(f.startswith("shared:") for f in fields.split()[6:])
    assert "size=1024k" in super_


def test_symlinked_mount_destination_stays_inside(runtime, make_bundle, private_rootfs, cid,
                                                   tmp_path):
    # The image has /escape -> a host directory. Mounting on /escape must
    # land inside the rootfs (<rootfs>/<that path>), never on the host.
    host = tmp_path / "host-target"
    host.mkdir()
    os.symlink(str(host), private_rootfs / "escape")
    os.symlink("../../../../../../../../" + str(host).lstrip("/"), private_rootfs / "escape2")

    def edit(c):
        c["root"]["readonly"] = False
        # No tmpfs on /tmp: the link targets live under /tmp.
        c["mounts"] = [m for m in c["mounts"] if m["destination"] != "/tmp"]
        c["mounts"].append({"destination": "/escape/sub", "type": "tmpfs", "source": "tmpfs"})
        c["mounts"].append({"destination": "/escape2/sub2", "type": "tmpfs", "source": "tmpfs"})
    b = make_bundle(["sh", "-c", "grep -c ' /escape' /proc/self/mountinfo; "
                     "grep tmpfs /proc/self/mountinfo | grep -c host-target"],
                    edit=edit, root=private_rootfs)
    r = run(runtime, b, cid)
    assert r.returncode in (0, 1), r.stderr
    assert not (host / "sub").exists() and not (host / "sub2").exists()
    with open("/proc/self/mountinfo") as f:
        assert str(host) not in f.read()
    if runtime.name != "kinglet":
        return  # crun 1.8.1 fails on the dangling link (openat2 ENOENT); host clean too
    assert r.returncode == 0, r.stderr
    # Created where the link points, but inside the rootfs.
    inside = private_rootfs / str(host).lstrip("/")
    assert (inside / "sub").is_dir() and (inside / "sub2").is_dir()


def test_dev_default_devices_and_links(runtime, make_bundle, cid):
    b = make_bundle(["sh", "-c", "for d in null zero full random urandom tty; do "
                     "stat -c '%n %F %t:%T %a' /dev/$d; done; for l in fd stdin ptmx; do "
                     "readlink /dev/$l; done; echo x > /dev/null && echo ok"])
    r = run(runtime, b, cid)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    want = {"/dev/null": "1:3", "/dev/zero": "1:5", "/dev/full": "1:7", "/dev/random": "1:8",
            "/dev/urandom": "1:9", "/dev/tty": "5:0"}
    for line in lines[:6]:
        name, kind, dev, mode = line.rsplit(" ", 2)[0].split(" ", 1)[0], None, line.split()[-2], line.split()[-1]
        assert "character special" in line, line
        assert want[name] == dev
        assert mode == "666"
    assert lines[6:9] == ["/proc/self/fd", "/proc/self/fd/0", "pts/ptmx"]
    assert lines[-1] == "ok"


def test_linux_devices(runtime, make_bundle, cid):
    def edit(c):
        c["linux"]["devices"] = [{"path": "/dev/mynull", "type": "c", "major": 1, "minor": 3,
                                  "fileMode": 0o620, "uid": 12, "gid": 34},
                                 {"path": "/dev/sub/myzero", "type": "c", "major": 1,
                                  "minor": 5}]
    b = make_bundle(["sh", "-c", "stat -c '%t:%T %a %u %g' /dev/mynull; "
                     "stat -c '%t:%T' /dev/sub/myzero; head -c 3 /dev/sub/myzero | wc -c"],
                    edit=edit)
    r = run(runtime, b, cid)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["1:3 620 12 34", "1:5", "3"]


def test_devpts_and_shm_and_mqueue(runtime, make_bundle, cid):
    b = make_bundle(["sh", "-c", "for m in /dev/pts /dev/shm /dev/mqueue /proc /sys; do "
                     "awk -v m=$m '$5 == m' /proc/self/mountinfo | wc -l; done"])
    r = run(runtime, b, cid)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1"] * 5


def test_no_host_fds_in_the_container(runtime, make_bundle, cid, tmp_path):
    # The caller leaks an inheritable fd to the runtime: the container must
    # not get it (only stdio; ls holds fd 3 for the directory it reads).
    leak = os.open(str(tmp_path), os.O_RDONLY)
    try:
        b = make_bundle(["ls", "/proc/self/fd"])
        r = runtime("run", "--bundle", b, cid, pass_fds=(leak,), capture_output=True)
    finally:
        os.close(leak)
    assert r.returncode == 0, r.stderr
    assert sorted(int(x) for x in r.stdout.split()) == [0, 1, 2, 3]


def test_preserve_fds(runtime, make_bundle, cid, tmp_path):
    p = tmp_path / "passed"
    p.write_text("through fd 3\n")
    b = make_bundle(["cat", "/proc/self/fd/3"])
    # A shell puts the file on fd 3 of the runtime (this process's own fd 3
    # may belong to pytest).
    r = subprocess.run(["sh", "-c", 'exec 3<"$0"; exec "$@"', str(p)]
                       + runtime.cmd("run", "--preserve-fds", "1", "--bundle", b, cid),
                       capture_output=True, text=True, timeout=30)
    assert r.stdout == "through fd 3\n", r.stderr


def test_cwd_cannot_be_a_host_fd(kinglet, make_bundle, cid, tmp_path):
    # CVE-2024-21626: a cwd of /proc/self/fd/N naming a host directory fd
    # that leaked into the init must not put the process outside the root.
    # kinglet only: Debian's crun 1.8.1 lists the host directory here.
    runtime = kinglet
    leak = os.open(str(tmp_path), os.O_RDONLY)
    try:
        def edit(c):
            c["process"]["cwd"] = f"/proc/self/fd/{leak}"
        b = make_bundle(["sh", "-c", "pwd; ls"], edit=edit)
        r = runtime("run", "--bundle", b, cid, pass_fds=(leak,))
    finally:
        os.close(leak)
    # Refused before the process runs: nothing listed, exit 1, one line
    # naming the field, and why (the magic link is not followed: ELOOP).
    assert r.stdout == ""
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "`process.cwd`" in lines[0] and f"/proc/self/fd/{leak}" in lines[0], lines[0]
    assert lines[0].endswith("Too many levels of symbolic links"), lines[0]
    assert not (kinglet.root / cid).exists()


def test_rootfs_propagation(runtime, make_bundle, cid):
    def edit(c):
        c["linux"]["rootfsPropagation"] = "private"
    r = run(runtime, make_bundle(["sh", "-c", "head -1 /proc/self/mountinfo"], edit=edit), cid)
    assert r.returncode == 0, r.stderr
    assert "shared:" not in r.stdout and "master:" not in r.stdout


def test_no_pivot(runtime, make_bundle, cid):
    # MS_MOVE + chroot (the initramfs path): the root is still the rootfs
    # and the process cannot see the host's files.
    b = make_bundle(["sh", "-c", "ls /; test -e /etc/passwd && echo has-passwd"])
    r = runtime("run", "--no-pivot", "--bundle", b, cid)
    assert r.returncode == 0, r.stderr
    assert "busybox" not in r.stdout and "bin" in r.stdout.split()
    assert "has-passwd" in r.stdout


def test_cgroup2_mount_with_cgroup_namespace(runtime, make_bundle, cid):
    def edit(c):
        c["mounts"].append({"destination": "/sys/fs/cgroup", "type": "cgroup2",
                            "source": "cgroup", "options": ["nosuid", "noexec", "nodev"]})
    b = make_bundle(["sh", "-c", "grep ^0:: /proc/self/cgroup; cat /sys/fs/cgroup/cgroup.procs | "
                     "wc -l; awk '$5 == \"/sys/fs/cgroup\"' /proc/self/mountinfo | sed 's/.* - //'"],
                    edit=edit)
    r = run(runtime, b, cid)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split()
    assert lines[0] == "0::/"  # the container's cgroup is its cgroup namespace root
    assert int(lines[1]) >= 1
    assert "cgroup2" in lines[2:]  # the fstype, after the " - " separator


def test_dotdot_lookups_survive_renames_elsewhere(kinglet, make_bundle, private_rootfs,
                                                  tmp_path):
    """A destination whose link climbs with "..": openat2 resolving in the
    root answers EAGAIN whenever a rename anywhere on the system raced the
    lookup, which a busy node does all the time (seen failing a create in
    a loaded run). The executor retries; here a process renames a file in
    a loop while containers are created."""
    os.symlink("../../../../../../../../srv/x", private_rootfs / "climb")

    def edit(c):
        c["root"]["readonly"] = False
        c["mounts"] += [{"destination": f"/climb/d{i}", "type": "tmpfs", "source": "tmpfs"}
                        for i in range(16)]
    b = make_bundle(["/bin/true"], edit=edit, root=private_rootfs)
    (tmp_path / "a").write_text("")
    renamer = subprocess.Popen(["/usr/bin/python3", "-c", (
        "import os, sys\n"
        "a, b = sys.argv[1], sys.argv[2]\n"
        "os.rename(a, b); os.rename(b, a)\n"
        "print('renaming', flush=True)\n"
        "while True:\n"
        "    os.rename(a, b); os.rename(b, a)\n"), str(tmp_path / "a"), str(tmp_path / "b")],
        stdout=subprocess.PIPE)
    try:
        assert renamer.stdout.readline() == b"renaming\n"
        for i in range(50):
            r = kinglet("run", "--bundle", b, f"t{uuid.uuid4().hex[:10]}")
            assert r.returncode == 0, r.stderr
    finally:
        renamer.kill()
        renamer.wait()
