"""process.apparmorProfile through `kinglet oci`, on a host with AppArmor
(tests/vm/run-cgroup-tests boots its VM with it): the init and an exec run
under the profile. Skipped, saying so, elsewhere."""
import os
import subprocess

import pytest

from ocihelpers import *  # noqa: F401,F403 (fixtures)
from test_process import host_apparmor
from waiting import wait_for

PARSER = "/sbin/apparmor_parser"
NAME = "kinglet-oci-test"
PROFILE = f"""profile {NAME} flags=(attach_disconnected,mediate_deleted) {{
  file, capability, network, signal, ptrace, unix, umount,
  deny /tmp/** w,
}}
"""


@pytest.mark.vm
@pytest.mark.skipif(not host_apparmor(), reason="needs AppArmor: run tests/vm/run-cgroup-tests")
def test_init_and_exec_run_under_the_profile(kinglet, make_bundle, cid, tmp_path):
    if not os.access(PARSER, os.X_OK):
        pytest.skip("apparmor_parser missing: scripts/install-deps test")
    subprocess.run([PARSER, "-Kr"], input=PROFILE.encode(), check=True)
    try:
        b = make_bundle(["sleep", "100000"], edit=lambda c: c["process"].update(
            apparmorProfile=NAME))
        with open(tmp_path / "out", "w") as out:
            kinglet("run", "--detach", "--bundle", b, cid, stdout=out, stderr=out, check=True,
                    timeout=120)
        pid = kinglet.state(cid)["pid"]
        wait_for(lambda: open(f"/proc/{pid}/attr/current").read().strip() == f"{NAME} (enforce)",
                 what="the init to run under the profile")
        r = kinglet("exec", cid, "sh", "-c", "cat /proc/self/attr/current; echo x > /tmp/x",
                    timeout=120)
        assert r.stdout.strip() == f"{NAME} (enforce)", r
        assert r.returncode != 0 and "ermission denied" in r.stderr, r
    finally:
        kinglet("delete", "--force", cid, timeout=120)
        subprocess.run([PARSER, "-R"], input=PROFILE.encode(), check=True)
