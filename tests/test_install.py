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
