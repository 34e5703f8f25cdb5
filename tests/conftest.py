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
