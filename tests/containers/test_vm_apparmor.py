"""AppArmor applied, on a host that has it (tests/vm/run-cgroup-tests boots
its VM with AppArmor on and Debian's apparmor_parser): the runtime default
is kinglet's profile, loaded on first use, for the container's init and
for its execs; a Localhost profile the host loaded is enforced; one it has
not loaded is refused. A privileged container runs unconfined. Kept small:
the VM's CPU is emulated."""
import os
import subprocess

import grpc
import pytest

from .test_apparmor import APPARMOR, refused, sc
from .test_spec import sh

pytestmark = [pytest.mark.vm,
              pytest.mark.skipif(not APPARMOR, reason="needs AppArmor: run tests/vm/run-cgroup-tests")]

PARSER = "/sbin/apparmor_parser"
DENY = "kinglet-test-deny-tmp"
PROFILE = f"""profile {DENY} flags=(attach_disconnected,mediate_deleted) {{
  file,
  capability,
  network,
  signal,
  ptrace,
  unix,
  umount,
  deny /tmp/** w,
}}
"""


def label(env, cid, pid):
    return sh(env, cid, f"cat /proc/{pid}/attr/current")[1].strip()


@pytest.fixture
def deny_profile():
    if not os.access(PARSER, os.X_OK):
        pytest.skip("apparmor_parser missing: scripts/install-deps test")
    subprocess.run([PARSER, "-Kr"], input=PROFILE.encode(), check=True)
    yield DENY
    subprocess.run([PARSER, "-R"], input=PROFILE.encode(), check=True)


def test_runtime_default_confines_init_and_exec(env):
    pb = env.pb
    pod = env.pod()
    cid = env.run(pod, "rd", ["/bin/sleep", "100000"], linux=sc(env, apparmor=pb.SecurityProfile(
        profile_type=pb.SecurityProfile.RuntimeDefault)))
    # the init, once it runs the program, and the exec itself
    assert label(env, cid, 1) == "kinglet-default (enforce)"
    assert label(env, cid, "self") == "kinglet-default (enforce)"
    assert "kinglet-default (enforce)" in open("/sys/kernel/security/apparmor/profiles").read()
    # nothing asked: the default too; privileged: unconfined
    none = env.run(pod, "none", ["/bin/sleep", "100000"])
    assert label(env, none, 1) == "kinglet-default (enforce)"
    priv = env.run(pod, "priv", ["/bin/sleep", "100000"], linux=sc(env, privileged=True))
    assert label(env, priv, 1) == "unconfined"


def test_localhost_profile_enforced_and_unloaded_refused(env, deny_profile):
    pb = env.pb
    pod = env.pod()
    e = refused(env, pod, "unloaded", sc(env, apparmor=pb.SecurityProfile(
        profile_type=pb.SecurityProfile.Localhost, localhost_ref="kinglet-test-not-loaded")))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
    assert "`kinglet-test-not-loaded` is not loaded" in e.details(), e.details()
    cid = env.run(pod, "lh", ["/bin/sleep", "100000"], linux=sc(env, apparmor=pb.SecurityProfile(
        profile_type=pb.SecurityProfile.Localhost, localhost_ref=deny_profile)))
    assert label(env, cid, 1) == f"{deny_profile} (enforce)"
    code, _, err = sh(env, cid, "echo x > /tmp/denied")
    assert code != 0 and "ermission denied" in err, err
    assert sh(env, cid, "echo x > /allowed && cat /allowed")[1] == "x\n"
    # the old string form names it too
    old = env.run(pod, "lh-old", ["/bin/sleep", "100000"],
                  linux=sc(env, apparmor_profile=f"localhost/{deny_profile}"))
    assert label(env, old, 1) == f"{deny_profile} (enforce)"
