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


# Sanitizer reports that a process's stderr would not show write here: a
# sanitizer build's monitor (src/monitor/local.mk; its stderr is /dev/null)
# and a ThreadSanitizer build's daemon, helpers and CLI (a report from a
# daemon the test then kills, too). Plain builds ignore these variables.
# Each test fails on a report that appeared (or grew) while it ran.
SANITIZER_REPORTS = tempfile.mkdtemp(prefix="kinglet-sanitizer-reports-")
os.environ["KINGLET_MONITOR_REPORT"] = f"{SANITIZER_REPORTS}/monitor"
os.environ["KINGLET_MONITOR_ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0"
os.environ["KINGLET_MONITOR_UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
# exitcode=0: the reports decide (a daemon a test kills never exits with
# TSan's 66), after the suppressions of tests/tsan.supp, applied here: the
# binary runs from a sealed memfd, which no symbolizer can open, so the
# reports are symbolized here with the binary the run tests (KINGLET_BIN).
# symbolize=0: TSan's own symbolizer would be a child of the daemon whose
# pipes the daemon keeps, and tests count the daemon's descriptors.
os.environ["TSAN_OPTIONS"] = (
    f"log_path={SANITIZER_REPORTS}/tsan:halt_on_error=0:exitcode=0:second_deadlock_stack=1"
    ":symbolize=0 "
    + os.environ.get("TSAN_OPTIONS", ""))
TSAN_SUPPRESSIONS = SRCDIR / "tests" / "tsan.supp"


def _symbolize(text):
    """kinglet's frames of a sanitizer report, as function (file:line)."""
    import re
    import subprocess
    binary = os.environ.get("KINGLET_BIN")
    addrs = sorted(set(re.findall(r"\(kinglet\+(0x[0-9a-f]+)\)", text)))
    if not binary or not addrs:
        return text
    out = subprocess.run(["addr2line", "-f", "-C", "-e", binary, *addrs],
                         capture_output=True, text=True).stdout.splitlines()
    names = {a: f"{out[2 * i]} {out[2 * i + 1].rsplit('/', 1)[-1]}"
             for i, a in enumerate(addrs) if 2 * i + 1 < len(out)}
    return re.sub(r"<null> <null> \(kinglet\+(0x[0-9a-f]+)\)",
                  lambda m: f"{names.get(m.group(1), '?')} (kinglet+{m.group(1)})", text)


def _fd_made_in(block):
    """The modules in whose code the descriptor a report is about was made
    ("Location is file descriptor N created by ... at:" and its stack)."""
    if "Location is file descriptor" not in block:
        return set()
    loc = block.split("Location is file descriptor", 1)[1].split("\n\n", 1)[0]
    import re
    return set(re.findall(r"\(([\w.+-]+)\+0x", loc))


def _unsuppressed(text):
    """The reports of a ThreadSanitizer log that tests/tsan.supp does not
    suppress (`race:NAME`: a report with a frame in function NAME;
    `fd_made_in:MODULE`: a report on a descriptor made in MODULE's code)."""
    pats = []
    if TSAN_SUPPRESSIONS.exists():
        for line in TSAN_SUPPRESSIONS.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                kind, _, name = line.partition(":")
                pats.append((kind.strip(), name.strip()))
    keep = []
    for block in _symbolize(text).split("==================\n"):
        if "WARNING: ThreadSanitizer:" not in block:
            continue
        kind = "race" if "data race" in block else block.split("ThreadSanitizer: ", 1)[1].split()[0]
        frames = [l.split()[1] for l in block.splitlines() if l.strip().startswith("#")]
        made_in = _fd_made_in(block)
        if not any((k == kind and n in frames) or (k == "fd_made_in" and n in made_in)
                   for k, n in pats):
            keep.append(block)
    return "==================\n".join(keep)


def _report_sizes():
    out = {}
    for f in os.listdir(SANITIZER_REPORTS):
        try:
            out[f] = os.path.getsize(os.path.join(SANITIZER_REPORTS, f))
        except OSError:
            pass
    return out


@pytest.fixture(autouse=True)
def no_sanitizer_report():
    before = _report_sizes()
    yield
    grew = sorted(f for f, n in _report_sizes().items() if n > before.get(f, 0))
    text = ""
    for f in grew:
        with open(os.path.join(SANITIZER_REPORTS, f), errors="replace") as fh:
            fh.seek(before.get(f, 0))
            got = fh.read()
        if f.startswith("tsan"):
            got = _unsuppressed(got)
        if got:
            text += f"--- {f}\n" + got[-8000:]
    if text:
        pytest.fail(f"a sanitizer reported:\n{text}")


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
    shutil.rmtree(SANITIZER_REPORTS, ignore_errors=True)
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
