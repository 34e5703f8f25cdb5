"""`make install` ships the binary, the man page and the systemd unit."""
import os
import subprocess


def test_make_install(kinglet_bin, tmp_path):
    builddir = os.path.dirname(kinglet_bin)
    if not os.path.exists(os.path.join(builddir, "Makefile")):
        import pytest
        pytest.skip("KINGLET_BIN is not inside a configured build tree")
    subprocess.run(["make", "-s", "-C", builddir, "install", f"DESTDIR={tmp_path}"],
                   check=True, stdout=subprocess.DEVNULL)
    files = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()}
    assert "usr/local/bin/kinglet" in files
    assert "usr/local/share/man/man8/kinglet.8" in files
    unit = tmp_path / "usr/local/lib/systemd/system/kinglet.service"
    assert "ExecStart=/usr/local/bin/kinglet daemon" in unit.read_text()
    man = (tmp_path / "usr/local/share/man/man8/kinglet.8").read_text()
    for flag in ["socket", "root", "state", "config", "log", "listen", "shutdown"]:
        assert "\\-\\-" + flag in man
    out = subprocess.run([str(tmp_path / "usr/local/bin/kinglet"), "--version"],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0 and "kinglet" in out.stdout


def test_install_deps_lists_each_package_once(srcdir, tmp_path):
    """Several areas need busybox-static: install-deps asks for it once."""
    fake = tmp_path / "bin"
    fake.mkdir()
    # Nothing installed, and not root: install-deps only names what it
    # would install.
    (fake / "dpkg-query").write_text("#!/bin/sh\nexit 1\n")
    (fake / "id").write_text("#!/bin/sh\necho 1000\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}")
    out = subprocess.run(["bash", os.path.join(srcdir, "scripts/install-deps"),
                          "build", "test", "bench"],
                         capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode == 1, out.stderr
    assert "missing Debian packages:" in out.stderr, out.stderr
    pkgs = out.stderr.split("missing Debian packages:", 1)[1].split("(run as root")[0].split()
    assert pkgs.count("busybox-static") == 1, pkgs
    assert "runc" in pkgs and "crun" in pkgs, pkgs
    dups = sorted({p for p in pkgs if pkgs.count(p) > 1})
    assert not dups, f"listed more than once: {dups}"


def test_clean_build_prints_no_warning(srcdir, tmp_path):
    """autoreconf, configure and make of a fresh copy print no warning:
    no `couldn't open directory 'm4'`, no `ar: 'u' modifier ignored`."""
    files = subprocess.run(["git", "-C", srcdir, "ls-files", "-z"], capture_output=True,
                           check=True, timeout=30).stdout.split(b"\0")
    src = tmp_path / "src"
    for f in files:
        if not f:
            continue
        name = f.decode()
        if not os.path.isfile(os.path.join(srcdir, name)):
            continue  # a file deleted in the work tree
        dst = src / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        with open(os.path.join(srcdir, name), "rb") as i, open(dst, "wb") as o:
            o.write(i.read())
        os.chmod(dst, os.stat(os.path.join(srcdir, name)).st_mode & 0o777)
    build = tmp_path / "build"
    build.mkdir()
    steps = [(["autoreconf", "-fi"], src),
             ([str(src / "configure"), "-q"], build),
             # Two module libraries: enough to see every `ar` line.
             (["make", "-s", "-j2", "libkbase.a", "libkmonitor.a"], build)]
    for cmd, cwd in steps:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, f"{cmd}: {out.stderr}"
        noise = [line for line in (out.stdout + out.stderr).splitlines()
                 if "warning" in line.lower() or "modifier ignored" in line]
        assert not noise, f"{cmd[0]} printed: {noise}"
