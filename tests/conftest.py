"""Shared pytest fixtures: where the built binary and the source tree are.

Run with Debian's /usr/bin/python3 (only it sees python3-grpcio). `make
check-integration` sets KINGLET_BIN and KINGLET_SRCDIR.
"""
import os
import pathlib
import shutil

import pytest

SRCDIR = pathlib.Path(os.environ.get("KINGLET_SRCDIR", pathlib.Path(__file__).resolve().parent.parent))


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
