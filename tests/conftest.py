"""Shared pytest fixtures: where the built binary and the source tree are.

Run with Debian's /usr/bin/python3 (only it sees python3-grpcio). `make
check-integration` sets KINGLET_BIN and KINGLET_SRCDIR.
"""
import os
import pathlib
import shutil
import tempfile
import uuid

import pytest

SRCDIR = pathlib.Path(os.environ.get("KINGLET_SRCDIR", pathlib.Path(__file__).resolve().parent.parent))


def _cgroup2_roots():
    return [r for r in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")
            if os.path.exists(r + "/cgroup.procs")]


# This run's own cgroup parent: every cgroup the tests name (the pods'
# parents, the OCI bundles' cgroupsPath) goes below it, and the run removes
# it and nothing else at its end. Another run on the same machine has its
# own: neither removes the other's cgroups (an empty pod cgroup, just made
# and not yet holding its first process, included). Tests read it from the
# environment (run_cgroup(), or the fixture of that name).
RUN_CGROUP_ENV = "KINGLET_TEST_CGROUP"
os.environ.setdefault(RUN_CGROUP_ENV, f"kinglet-test-run-{os.getpid()}-{uuid.uuid4().hex[:6]}")


def run_cgroup():
    """This run's cgroup parent, as a cgroupsPath: "/kinglet-test-run-..."."""
    return "/" + os.environ[RUN_CGROUP_ENV]


def _remove_run_cgroups():
    for r in _cgroup2_roots():
        top = r + run_cgroup()
        for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass


@pytest.fixture(name="run_cgroup")
def run_cgroup_fixture():
    return run_cgroup()


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


def pytest_unconfigure(config):
    # Parent cgroups that containers of this run left (the executor, like
    # runc, removes a container's own cgroup, not the parents it made):
    # this run's own, removed when empty.
    _remove_run_cgroups()
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
