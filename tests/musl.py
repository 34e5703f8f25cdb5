"""Test programs in C, built static against musl (musl-tools, a build
dependency) so that they run in any container's root: the attackers and
racers of the exec and mount tests. Standard library and pytest only."""
import os
import shutil
import subprocess

import pytest


def static_prog(tmp_path_factory, source, what):
    """source (a C file) built static into a temporary directory, named as
    the file without .c; the test is skipped, naming what the program is
    for, when there is no musl-gcc."""
    cc = shutil.which("musl-gcc")
    if not cc:
        pytest.skip(f"needs musl-gcc (musl-tools, a build dependency) for the static {what}")
    name = os.path.splitext(os.path.basename(source))[0]
    out = tmp_path_factory.mktemp(name) / name
    subprocess.run([cc, "-static", "-O2", "-o", str(out), source], check=True)
    return out
