"""Fixtures for the cgroup tests: the kcgroup driver (tests/vm/kcgroup.c,
which calls src/oci/cgroup.c), the cgroup2 mount, and cgroups that are
killed and removed after each test.

Tests marked `vm` need cgroup v2 controllers (cpu, memory, pids, ...): they
are skipped on hybrid hosts and run by tests/vm/run-cgroup-tests, directly
where the host has the controllers and inside ../shared/vm/run otherwise.
"""
import os
import shutil

import pytest

from cghelpers import SRCDIR, Cgroups, cgroup2_mount, has_v2_controllers, root_controllers


def pytest_collection_modifyitems(config, items):
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="cgroup tests need root")
        for item in items:
            if "tests/vm/" in str(item.fspath):
                item.add_marker(skip)
        return
    if has_v2_controllers():
        return
    skip = pytest.mark.skip(
        reason="needs cgroup v2 controllers (cpu, cpuset, memory, pids, io): this host has "
        f"{sorted(root_controllers()) or 'none'}; run tests/vm/run-cgroup-tests"
    )
    for item in items:
        if "vm" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def kcgroup():
    candidates = []
    if os.environ.get("KCGROUP"):
        candidates.append(os.environ["KCGROUP"])
    if os.environ.get("KINGLET_BUILDDIR"):
        candidates.append(os.path.join(os.environ["KINGLET_BUILDDIR"], "tests/vm/kcgroup"))
    if os.environ.get("KINGLET_BIN"):
        candidates.append(os.path.join(os.path.dirname(os.environ["KINGLET_BIN"]), "tests/vm/kcgroup"))
    candidates.append(str(SRCDIR / "build" / "default" / "tests" / "vm" / "kcgroup"))
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    pytest.fail(f"kcgroup driver not found (tried {candidates}): make tests/vm/kcgroup")


@pytest.fixture(scope="session")
def busybox():
    path = shutil.which("busybox") or "/bin/busybox"
    if not os.access(path, os.X_OK):
        pytest.fail("busybox not found: install the Debian package busybox-static")
    return path


@pytest.fixture
def cgroups(kcgroup):
    if not cgroup2_mount():
        pytest.skip("no cgroup2 file system mounted")
    c = Cgroups(kcgroup)
    yield c
    c.cleanup()
