"""Each way CreateContainer can fail past the daemon's own checks (in the
executor, its monitor or the container's init, other processes) reaches
the client with the gRPC code of the real errno and the system's text
once: errors cross those processes as {code, message} (issue 19, item 2),
never as text that already holds strerror ("...: No such file or
directory: No such file or directory: Input/output error")."""
import os
import re

import grpc
import pytest

from .test_cdi import cdi_dirs, cdi_env, write  # noqa: F401 (fixtures)

SYSTEM_TEXTS = ("No such file or directory", "Not a directory", "Permission denied",
                "Input/output error", "Invalid argument", "Resource temporarily unavailable",
                "Operation canceled")


def fails(env, pod, name, **kw):
    with pytest.raises(grpc.RpcError) as e:
        env.create(pod, None, env.config(name, **kw))
    return e.value.code(), e.value.details()


def check(code, details, want_code, text, container_id=True):
    """The code, the system's text exactly once (and no other), no errno
    number, the failed step named once, and nothing of the container
    left."""
    assert code == want_code, (code, details)
    assert details.startswith("create container") and details.count("create container") == 1, \
        details
    if text:
        assert details.count(text) == 1, details
    for other in SYSTEM_TEXTS:
        if other != text:
            assert other not in details, details
    assert not re.search(r"\(code \d+\)", details), details


def nothing_left(env):
    assert [c.id for c in env.list()] == []
    d = os.path.join(env.d.state, "containers")
    assert not os.path.isdir(d) or os.listdir(d) == []


def test_mount_source_failures(env, tmp_path):
    """A bind source the init cannot reach: a dangling symlink (kubelet's
    missing sources are made as directories; a link to nothing cannot be)
    and a path below a file."""
    pb = env.pb
    pod = env.pod()
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    (tmp_path / "file").write_text("x")
    code, details = fails(env, pod, "dangling", command=["/bin/true"], mounts=[
        pb.Mount(container_path="/x", host_path=str(tmp_path / "dangling"))])
    check(code, details, grpc.StatusCode.NOT_FOUND, "No such file or directory")
    assert f"`{tmp_path / 'dangling'}`" in details
    code, details = fails(env, pod, "below-file", command=["/bin/true"], mounts=[
        pb.Mount(container_path="/x", host_path=str(tmp_path / "file" / "f"))])
    check(code, details, grpc.StatusCode.INTERNAL, "Not a directory")
    nothing_left(env)


def test_bad_user(env):
    pb = env.pb
    pod = env.pod()
    code, details = fails(env, pod, "ghost", command=["/bin/true"], linux=pb.LinuxContainerConfig(
        security_context=pb.LinuxContainerSecurityContext(run_as_username="ghost")))
    check(code, details, grpc.StatusCode.INVALID_ARGUMENT, "Invalid argument")
    assert "`ghost` is not in the image's /etc/passwd" in details
    nothing_left(env)


def test_exec_failures(env):
    """What execve would refuse is refused by create, as runc's create
    does: a missing program, one without an execute bit, a directory."""
    pod = env.pod()
    code, details = fails(env, pod, "missing", command=["/no/such/binary"])
    check(code, details, grpc.StatusCode.NOT_FOUND, "No such file or directory")
    assert "`process.args[0]`: `/no/such/binary`" in details
    code, details = fails(env, pod, "in-path", command=["no-such-program"])
    check(code, details, grpc.StatusCode.NOT_FOUND, None)
    assert "`no-such-program` not found in $PATH" in details
    for path in ("/etc/passwd", "/etc"):
        code, details = fails(env, pod, "noexec", command=[path])
        check(code, details, grpc.StatusCode.PERMISSION_DENIED, "Permission denied")
        assert f"`process.args[0]`: `{path}`" in details
    nothing_left(env)


HOOK_SPEC = """\
cdiVersion: "0.6.0"
kind: example.com/hook
devices:
- name: fails
  containerEdits:
    hooks:
    - hookName: createRuntime
      path: /bin/sh
      args: [sh, -c, 'exit 3']
"""


def test_hook_failure(cdi_env, cdi_dirs):  # noqa: F811 (fixtures)
    """A createRuntime hook (here from a CDI device) that fails: the
    executor runs it, its message comes through once, as INTERNAL (not
    CANCELLED, which would say the client cancelled)."""
    env, (etc, _) = cdi_env, cdi_dirs
    pb = env.pb
    write(etc / "hook.yaml", HOOK_SPEC)
    pod = env.pod()
    code, details = fails(env, pod, "hooked", command=["/bin/true"],
                          CDI_devices=[pb.CDIDevice(name="example.com/hook=fails")])
    check(code, details, grpc.StatusCode.INTERNAL, None)
    assert details.endswith("`hooks.createRuntime[0]`: hook `/bin/sh`: exit status 3"), details
    nothing_left(env)


def test_cgroup_failure(env):
    """The container's cgroup cannot be made: its parent allows no more
    descendants (EAGAIN from the kernel)."""
    pod = env.pod()
    root = "/sys/fs/cgroup/unified"
    if not os.path.exists(root + "/cgroup.procs"):
        root = "/sys/fs/cgroup"
    parent = root + env.cgroup_parent
    with open(parent + "/cgroup.stat") as f:
        have = int(dict(ln.split() for ln in f)["nr_descendants"])
    with open(parent + "/cgroup.max.descendants", "w") as f:
        f.write(str(have))
    try:
        code, details = fails(env, pod, "no-cgroup", command=["/bin/true"])
    finally:
        with open(parent + "/cgroup.max.descendants", "w") as f:
            f.write("max")
    check(code, details, grpc.StatusCode.UNAVAILABLE, "Resource temporarily unavailable")
    assert "`linux.cgroupsPath`" in details
    nothing_left(env)
