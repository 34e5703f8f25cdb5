"""AppArmor requests through CreateContainer, as containerd 2 takes them:
the SecurityProfile, else the deprecated `apparmor_profile` string. On a
host without AppArmor a Localhost profile is refused, naming it, and
RuntimeDefault and Unconfined run as they are (test_vm_apparmor.py has the
profiles applied, on a host or in the VM with AppArmor). SELinux options on
a host without SELinux are logged and ignored."""
import json
import os

import grpc
import pytest

APPARMOR = (os.path.exists("/sys/kernel/security/apparmor") and
            open("/sys/module/apparmor/parameters/enabled").read().startswith("Y")
            if os.path.exists("/sys/module/apparmor/parameters/enabled") else False)
no_apparmor = pytest.mark.skipif(APPARMOR, reason="the host has AppArmor: test_vm_apparmor.py")


def sc(env, **kw):
    pb = env.pb
    return pb.LinuxContainerConfig(security_context=pb.LinuxContainerSecurityContext(**kw))


def refused(env, pod, name, linux):
    with pytest.raises(grpc.RpcError) as e:
        env.create(pod, None, env.config(name, command=["/bin/true"], linux=linux))
    return e.value


@no_apparmor
def test_localhost_profile_refused_without_apparmor(env):
    pb = env.pb
    pod = env.pod()
    e = refused(env, pod, "lh", sc(env, apparmor=pb.SecurityProfile(
        profile_type=pb.SecurityProfile.Localhost, localhost_ref="my-app-profile")))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
    assert "`my-app-profile`" in e.details() and "no AppArmor" in e.details(), e.details()
    # the old string form, as older kubelets send it
    e = refused(env, pod, "lh-old", sc(env, apparmor_profile="localhost/old-app-profile"))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
    assert "`old-app-profile`" in e.details() and "no AppArmor" in e.details(), e.details()
    assert not env.list(), "nothing of a refused container stays"


@no_apparmor
def test_default_and_unconfined_run_without_apparmor(env):
    pb = env.pb
    pod = env.pod()
    asks = {
        "default": sc(env, apparmor=pb.SecurityProfile(
            profile_type=pb.SecurityProfile.RuntimeDefault)),
        "default-old": sc(env, apparmor_profile="runtime/default"),
        "unconfined": sc(env, apparmor=pb.SecurityProfile(
            profile_type=pb.SecurityProfile.Unconfined)),
        "unconfined-old": sc(env, apparmor_profile="unconfined"),
        "none": None,
    }
    for name, linux in asks.items():
        cid = env.run(pod, name, ["/bin/true"], linux=linux)
        assert env.wait_exited(cid).exit_code == 0, name
        with open(os.path.join(env.bundle(cid), "config.json")) as f:
            assert "apparmorProfile" not in json.load(f)["process"], name
    assert "AppArmor" not in env.d.logtext()


def test_bad_apparmor_requests_refused(env):
    pb = env.pb
    pod = env.pod()
    bad = {
        "string": (sc(env, apparmor_profile="docker-default"), "`docker-default` is unknown"),
        "ref-on-default": (sc(env, apparmor=pb.SecurityProfile(
            profile_type=pb.SecurityProfile.RuntimeDefault, localhost_ref="x")),
            "Localhost profile only"),
        "no-ref": (sc(env, apparmor=pb.SecurityProfile(
            profile_type=pb.SecurityProfile.Localhost)), "needs a profile name"),
        "newline": (sc(env, apparmor=pb.SecurityProfile(
            profile_type=pb.SecurityProfile.Localhost, localhost_ref="a\nchangeprofile b")),
            "needs a profile name"),
        "type": (sc(env, apparmor=pb.SecurityProfile(profile_type=7)), "unknown profile type"),
    }
    for name, (linux, text) in bad.items():
        e = refused(env, pod, name, linux)
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (name, e)
        assert text in e.details(), (name, e.details())


@pytest.mark.skipif(os.path.exists("/sys/fs/selinux/enforce"), reason="the host has SELinux")
def test_selinux_options_run_without_selinux(env):
    """kubelet sends a pod's SELinux options to every node: where SELinux is
    off they are logged and ignored (as containerd and CRI-O do), never a
    refusal that would keep a portable pod off this node."""
    pb = env.pb
    pod = env.pod()
    cid = env.run(pod, "se", ["/bin/true"], linux=sc(env, selinux_options=pb.SELinuxOption(
        user="system_u", role="system_r", type="container_t", level="s0:c1,c2")))
    assert env.wait_exited(cid).exit_code == 0
    assert env.status(cid).status.message == ""
    assert f"container `{cid}`: SELinux options not applied: the host has no SELinux" in \
        env.d.logtext()
