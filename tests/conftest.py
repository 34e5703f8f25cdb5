"""Shared pytest fixtures: where the built binary and the source tree are.

Run with Debian's /usr/bin/python3 (only it sees python3-grpcio). `make
check-integration` sets KINGLET_BIN and KINGLET_SRCDIR.
"""
import os
import pathlib
import shutil
import tempfile

import pytest

SRCDIR = pathlib.Path(os.environ.get("KINGLET_SRCDIR", pathlib.Path(__file__).resolve().parent.parent))


def _cgroup2_roots():
    return [r for r in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")
            if os.path.exists(r + "/cgroup.procs")]


def _kinglet_parents():
    """The parent cgroups the executor makes for containers whose
    cgroupsPath names none of its own ("kinglet") and those the tests name
    ("kinglet-test", ...), at the cgroup2 roots."""
    out = set()
    for r in _cgroup2_roots():
        try:
            out |= {os.path.join(r, n) for n in os.listdir(r)
                    if n.startswith("kinglet") and os.path.isdir(os.path.join(r, n))}
        except OSError:
            pass
    return out


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """tmp_path and tmp_path_factory under a directory of this run's own,
    removed at its end: pytest's default (/tmp/pytest-of-USER) keeps the
    last three runs, hundreds of MB of rootfs copies and images. Before
    pytest's own configure hook, which reads basetemp. --basetemp given on
    the command line is left alone."""
    if config.option.basetemp is None:
        config._kinglet_basetemp = tempfile.mkdtemp(prefix="kinglet-pytest-")
        config.option.basetemp = config._kinglet_basetemp
    config._kinglet_parents = _kinglet_parents()


def pytest_unconfigure(config):
    # Parent cgroups that containers of this run left (the executor, like
    # runc, removes a container's own cgroup, not the parents it made):
    # removed when empty and not there before the run.
    for parent in _kinglet_parents() - getattr(config, "_kinglet_parents", set()):
        for dirpath, _, _ in sorted(os.walk(parent), key=lambda w: -w[0].count("/")):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass
    d = getattr(config, "_kinglet_basetemp", None)
    if d:
        shutil.rmtree(d, ignore_errors=True)
        if os.path.exists(d):
            print(f"\nkinglet tests: could not remove {d} (a mount left inside?)")


@pytest.fixture(scope="session")
def srcdir():
    return SRCDIR


@pytest.fixture(scope="session")
def kinglet_bin():
    path = os.environ.get("KINGLET_BIN")
    if not path:
        path = shutil.which("kinglet") or str(SRCDIR / "build" / "default" / "kinglet")
    if not os.access(path, os.X_OK):
        pytest.fail(f"kinglet binary not found at {path}: build it or set KINGLET_BIN")
    return path
