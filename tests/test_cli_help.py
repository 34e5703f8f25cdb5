"""Every command and subcommand of the binary answers -h and --help with its
usage on stdout and exit status 0, and `kinglet help [COMMAND [SUB]]` prints
the same. The commands are read from the code that dispatches them, so that
a new command without help fails here."""
import os
import re
import subprocess

import pytest


def source(srcdir, path):
    with open(os.path.join(srcdir, path)) as f:
        return f.read()


def top_commands(srcdir):
    names = set(re.findall(r'strcmp\(argv\[1\], "([a-z-]+)"\) == 0', source(srcdir, "src/main.c")))
    names.discard("help")
    return sorted(names)


def oci_commands(srcdir):
    names = set(re.findall(r'strcmp\(cmd, "([a-z-]+)"\) == 0', source(srcdir, "src/oci/cli.c")))
    names.discard("help")
    return sorted(names)


def image_commands(srcdir):
    text = source(srcdir, "src/image/cli.c") + source(srcdir, "src/cri/image_cli.c")
    names = set(re.findall(r'strcmp\(cmd, "([a-z-]+)"\)', text))
    names.discard("help")
    return sorted(names)


def run(kinglet_bin, *args):
    # From an empty directory: a command that ran instead of showing its
    # help (`oci spec` writes ./config.json) leaves its trace there.
    cwd = os.environ.get("KINGLET_HELP_CWD", "/nonexistent")
    return subprocess.run([kinglet_bin, *args], capture_output=True, text=True, timeout=10,
                          stdin=subprocess.DEVNULL, cwd=cwd)


@pytest.fixture(autouse=True)
def empty_cwd(tmp_path, monkeypatch):
    d = tmp_path / "cwd"
    d.mkdir()
    monkeypatch.setenv("KINGLET_HELP_CWD", str(d))
    yield
    assert not os.listdir(d), f"a help run left {os.listdir(d)}"


def assert_usage(r, *words):
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
    assert r.stderr == ""
    first = r.stdout.splitlines()[0] if r.stdout else ""
    assert first.lower().startswith("usage: kinglet"), r.stdout
    for w in words:
        assert w in first, f"`{w}` not in `{first}`"


def test_commands_found(srcdir):
    # The enumeration itself must see the commands, or the tests below
    # would pass on nothing.
    assert {"oci", "image", "daemon", "image-pull"} <= set(top_commands(srcdir))
    assert {"create", "run", "exec", "kill", "update", "spec", "features"} <= \
        set(oci_commands(srcdir))
    assert {"pull", "ls", "rm", "import", "inspect", "fsinfo"} <= set(image_commands(srcdir))


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_top_level(kinglet_bin, srcdir, flag):
    assert_usage(run(kinglet_bin, flag), "kinglet")
    for cmd in top_commands(srcdir):
        r = run(kinglet_bin, cmd, flag)
        assert_usage(r)
        assert r.stdout == run(kinglet_bin, "help", cmd).stdout


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_oci(kinglet_bin, srcdir, tmp_path, flag):
    top = run(kinglet_bin, "oci", flag)
    assert_usage(top, "oci")
    assert run(kinglet_bin, "oci", "help").stdout == top.stdout
    assert run(kinglet_bin, "help", "oci").stdout == top.stdout
    for cmd in oci_commands(srcdir):
        assert re.search(rf"^  {cmd} ", top.stdout, re.M), f"{cmd} not listed"
        r = run(kinglet_bin, "oci", cmd, flag)
        assert_usage(r, f"oci {cmd}")
        assert r.stdout == run(kinglet_bin, "oci", "help", cmd).stdout
        assert r.stdout == run(kinglet_bin, "help", "oci", cmd).stdout
        # After global options too, and with the state root given.
        r2 = run(kinglet_bin, "oci", "--root", str(tmp_path), cmd, flag)
        assert r2.stdout == r.stdout and r2.returncode == 0
    # Among a command's options, not only first.
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    r = run(kinglet_bin, "oci", "create", "--bundle", str(bundle), flag)
    assert_usage(r, "oci create")
    assert not os.listdir(bundle)
    # An operand after the id is the container's command line, not ours.
    r = run(kinglet_bin, "oci", "--root", str(tmp_path), "exec", "nosuch", "sh", flag)
    assert r.returncode != 0 and "nosuch" in r.stderr


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_image(kinglet_bin, srcdir, tmp_path, flag):
    root = str(tmp_path / "root")
    top = run(kinglet_bin, "image", flag)
    assert_usage(top, "image")
    assert run(kinglet_bin, "image", "help").stdout == top.stdout
    assert run(kinglet_bin, "help", "image").stdout == top.stdout
    for cmd in image_commands(srcdir):
        assert re.search(rf"^  {cmd} ", top.stdout, re.M), f"{cmd} not listed"
        r = run(kinglet_bin, "image", "--root", root, cmd, flag)
        assert_usage(r, f" {cmd}")
        assert r.stdout == run(kinglet_bin, "image", "help", cmd).stdout
        assert r.stdout == run(kinglet_bin, "help", "image", cmd).stdout
        # Through a daemon's socket too: help never connects.
        r2 = run(kinglet_bin, "image", "--socket", str(tmp_path / "none.sock"), cmd, flag)
        assert r2.stdout == r.stdout and r2.returncode == 0
    r = run(kinglet_bin, "image", "--root", root, "pull", "--creds", "u:p", flag)
    assert_usage(r, "pull")
    assert not os.path.exists(root), "help touched the store"


def test_unknown_commands_fail_cleanly(kinglet_bin):
    for args in [("help", "nosuch"), ("help", "oci", "nosuch"), ("help", "image", "nosuch"),
                 ("oci", "nosuch", "--help"), ("image", "nosuch", "--help")]:
        r = run(kinglet_bin, *args)
        assert r.returncode == 2, args
        assert r.stdout == ""
        assert "nosuch" in r.stderr and "help" in r.stderr, r.stderr


def test_internal_helper_help_does_not_start_it(kinglet_bin):
    r = run(kinglet_bin, "image-pull", "--help")  # would wait for a request on fd 3
    assert_usage(r, "image-pull")
