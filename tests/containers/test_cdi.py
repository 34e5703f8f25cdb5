"""CDI devices (issue 17, item 3): CRI cdi_devices and `cdi.k8s.io/*`
annotations name devices of CDI specs (JSON and YAML) in the directories
of --cdi-spec-dirs; their edits (device nodes with their cgroup rule,
mounts, env, hooks, additional GIDs) reach the container, and a name that
nothing resolves or a broken spec fails CreateContainer naming it, with
nothing of the container left behind."""
import json
import os

import grpc
import pytest

from .test_spec import sh, sleeper


@pytest.fixture
def cdi_dirs(tmp_path):
    etc, run = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    etc.mkdir()
    run.mkdir()
    return etc, run


@pytest.fixture
def cdi_env(env_factory, cdi_dirs):
    etc, run = cdi_dirs
    return env_factory(extra_args=["--cdi-spec-dirs", f"{etc},{run}"])


def write(path, text):
    """Replaces path at once, as a driver rewriting its spec should."""
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    os.rename(tmp, path)


def write_yaml(dirpath, stem, text):
    """A YAML spec as stem.yaml (every build reads YAML, the static one
    too); the path written."""
    path = dirpath / (stem + ".yaml")
    write(path, text)
    return path


YAML_SPEC = """\
cdiVersion: "0.6.0"
kind: example.com/null
containerEdits:
  env:
  - CDI_SPEC=null-spec
  mounts:
  - hostPath: {data}
    containerPath: /cdi/data
    options: [rbind, ro]
  hooks:
  - hookName: createRuntime
    path: /bin/sh
    args: [sh, -c, 'echo "$CDI_HOOK" > {marker}']
    env: [CDI_HOOK=ran]
devices:
- name: "0"
  containerEdits:
    env: [CDI_DEV=null0]
    deviceNodes:
    - path: /dev/cdi-null
      hostPath: /dev/null
      fileMode: 0640
    additionalGids: [4242, 0]
"""


def zero_spec(name="z", env="CDI_ZERO=1", path="/dev/cdi-zero"):
    return json.dumps({
        "cdiVersion": "0.5.0", "kind": "example.com/zero",
        "devices": [{"name": name, "containerEdits": {
            "env": [env],
            "deviceNodes": [{"path": path, "hostPath": "/dev/zero", "permissions": "rw"}]}}]})


def containers_left(env):
    """Containers listed, bundles and writable layers on disk."""
    def ls(d):
        d = os.path.join(d, "containers")
        return sorted(os.listdir(d)) if os.path.isdir(d) else []
    return [c.id for c in env.list()], ls(env.d.state), ls(env.d.root)


def test_cdi_devices_reach_the_container(cdi_env, cdi_dirs, tmp_path):
    env, (etc, run) = cdi_env, cdi_dirs
    pb = env.pb
    data = tmp_path / "data"
    data.mkdir()
    (data / "hello").write_text("from the host\n")
    marker = tmp_path / "hook-ran"
    write(run / "zero.json", zero_spec())
    pod = env.pod()
    write_yaml(etc, "null", YAML_SPEC.format(data=data, marker=marker))
    cid = sleeper(env, pod, "cdi", CDI_devices=[pb.CDIDevice(name="example.com/null=0")],
                  annotations={"cdi.k8s.io/zero": "example.com/zero=z"})
    # the device nodes under their new names, with the spec's mode (YAML
    # 0640 is octal) and the host's type and numbers
    code, out, err = sh(env, cid, "ls -ln /dev/cdi-null /dev/cdi-zero")
    assert code == 0, err
    lines = {ln.split()[-1]: ln.split() for ln in out.splitlines()}
    assert lines["/dev/cdi-null"][0] == "crw-r-----", out
    assert lines["/dev/cdi-null"][4:6] == ["1,", "3"], out
    assert lines["/dev/cdi-zero"][0].startswith("c") and lines["/dev/cdi-zero"][4:6] == ["1,", "5"]
    assert sh(env, cid, "echo x > /dev/cdi-null && head -c 3 /dev/cdi-zero | od -An -tx1")[1] \
        .split() == ["00", "00", "00"]
    # env of the devices and of the spec, the spec's mount, the GID
    out = sh(env, cid, "env")[1].splitlines()
    assert {"CDI_DEV=null0", "CDI_SPEC=null-spec", "CDI_ZERO=1"} <= set(out), out
    assert sh(env, cid, "cat /cdi/data/hello")[1] == "from the host\n"
    assert sh(env, cid, "touch /cdi/data/x")[0] != 0  # ro
    assert "4242" in sh(env, cid, "id -G")[1].split()
    assert 4242 in env.status(cid).status.user.linux.supplemental_groups
    # the hook ran on the host, with its own env
    assert marker.read_text() == "ran\n"
    # the device cgroup allows exactly the two nodes, with the spec's access
    spec = json.load(open(os.path.join(env.bundle(cid), "config.json")))
    rules = [(r.get("type"), r.get("major"), r.get("minor"), r["access"])
             for r in spec["linux"]["resources"]["devices"] if r["allow"]]
    assert ("c", 1, 3, "rwm") in rules and ("c", 1, 5, "rw") in rules, rules
    # a container that asks for nothing gets nothing
    plain = sleeper(env, pod, "plain")
    assert sh(env, plain, "ls /dev/cdi-null")[0] != 0
    assert "CDI_SPEC" not in sh(env, plain, "env")[1]


def test_cdi_unknown_device_and_broken_spec_fail_create(cdi_env, cdi_dirs):
    env, (etc, run) = cdi_env, cdi_dirs
    pb = env.pb
    write(run / "zero.json", zero_spec())
    pod = env.pod()

    def create(name, *names, annotations=None):
        with pytest.raises(grpc.RpcError) as e:
            sleeper(env, pod, name, CDI_devices=[pb.CDIDevice(name=n) for n in names],
                    annotations=annotations or {})
        return e.value

    # a kind nothing defines, and a device its spec lacks: NOT_FOUND naming it
    e = create("unknown", "example.com/zero=z", "example.com/gpu=0")
    assert e.code() == grpc.StatusCode.NOT_FOUND, e.details()
    assert "example.com/gpu=0" in e.details()
    e = create("unknown2", annotations={"cdi.k8s.io/x": "example.com/zero=nope"})
    assert e.code() == grpc.StatusCode.NOT_FOUND and "example.com/zero=nope" in e.details()
    # a name that is not qualified: INVALID_ARGUMENT on the request itself
    e = create("badname", "gpu0")
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "gpu0" in e.details()
    # a spec of the kind asked for that does not validate: the file and why
    bad = write_yaml(etc, "bad", 'cdiVersion: "0.6.0"\nkind: example.com/bad\ndevices:\n'
                     '- name: d\n  containerEdits:\n    deviceNodes:\n    - path: dev/relative\n')
    e = create("bad", "example.com/zero=z", "example.com/bad=d")
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.details()
    assert str(bad) in e.details() and "dev/relative" in e.details()
    # a file that is not even JSON: named when a device is unresolvable
    write(etc / "broken.json", '{"cdiVersion": "0.6.0", "kind": ')
    e = create("broken", "example.com/other=0")
    assert str(etc / "broken.json") in e.details() and "not JSON" in e.details()
    # a spec whose edit kinglet cannot apply is refused, not half-applied
    write(run / "rdt.json", json.dumps({
        "cdiVersion": "0.7.0", "kind": "example.com/rdt", "devices": [{"name": "r",
        "containerEdits": {"env": ["A=1"], "intelRdt": {"closID": "x"}}}]}))
    e = create("rdt", "example.com/rdt=r")
    assert "intelRdt" in e.details()
    # a device node the host lacks
    write(run / "gone.json", zero_spec(name="gone", path="/dev/cdi-gone").replace(
        "/dev/zero", "/dev/kinglet-test-no-such-node").replace("zero", "gone", 1))
    e = create("gone", "example.com/gone=gone")
    assert e.code() == grpc.StatusCode.NOT_FOUND and "/dev/kinglet-test-no-such-node" in \
        e.details()
    # nothing of any failed create is left: no container, no bundle
    assert containers_left(env) == ([], [], [])
    # and the good spec still works beside the broken ones
    cid = sleeper(env, pod, "good", CDI_devices=[pb.CDIDevice(name="example.com/zero=z")])
    assert sh(env, cid, "test -c /dev/cdi-zero && echo ok")[1] == "ok\n"


def test_cdi_spec_replaced_between_containers_is_reread(cdi_env, cdi_dirs):
    env, (etc, run) = cdi_env, cdi_dirs
    pb = env.pb
    write(run / "zero.json", zero_spec(env="CDI_GEN=1"))
    pod = env.pod()
    dev = [pb.CDIDevice(name="example.com/zero=z")]
    a = sleeper(env, pod, "a", CDI_devices=dev)
    assert "CDI_GEN=1" in sh(env, a, "env")[1].splitlines()
    write(run / "zero.json", zero_spec(env="CDI_GEN=2", path="/dev/cdi-zero2"))
    b = sleeper(env, pod, "b", CDI_devices=dev)
    assert "CDI_GEN=2" in sh(env, b, "env")[1].splitlines()
    assert sh(env, b, "test -c /dev/cdi-zero2 && test ! -e /dev/cdi-zero && echo ok")[1] == "ok\n"
    # a spec in the later directory overrides the earlier one's device
    etc_spec = write_yaml(etc, "zero", 'cdiVersion: "1.0.0"\nkind: example.com/zero\n'
                          'devices:\n- name: z\n  containerEdits:\n    env: [CDI_GEN=etc]\n')
    c = sleeper(env, pod, "c", CDI_devices=dev)
    assert "CDI_GEN=2" in sh(env, c, "env")[1].splitlines()
    # the device removed from the spec: the next create fails
    write(run / "zero.json", zero_spec(name="other"))
    d = sleeper(env, pod, "d", CDI_devices=dev)
    assert "CDI_GEN=etc" in sh(env, d, "env")[1].splitlines()
    os.unlink(etc_spec)
    with pytest.raises(grpc.RpcError) as e:
        sleeper(env, pod, "e", CDI_devices=dev)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "example.com/zero=z" in \
        e.value.details()


def test_cdi_device_leaves_the_order_of_other_mounts_alone(cdi_env, cdi_dirs, tmp_path):
    """A volume at /etc lies under the pod's /etc/hosts, as containerd
    orders mounts parents first, whether or not the container also asks for
    a CDI device (whose spec has no mounts): the device moves no mount."""
    env, (etc, run) = cdi_env, cdi_dirs
    pb = env.pb
    vol = tmp_path / "etc-volume"
    vol.mkdir()
    (vol / "hosts").write_text("10.9.9.9 from-the-volume\n")
    (vol / "other").write_text("the volume's\n")
    write(run / "zero.json", zero_spec())
    pod = env.pod()
    mounts = [pb.Mount(container_path="/etc", host_path=str(vol))]
    plain = sleeper(env, pod, "plain", mounts=mounts)
    dev = sleeper(env, pod, "dev", mounts=mounts,
                  CDI_devices=[pb.CDIDevice(name="example.com/zero=z")])
    hosts = {}
    for cid in (plain, dev):
        code, out, err = sh(env, cid, "cat /etc/hosts /etc/other")
        assert code == 0, err
        hosts[cid] = out
    assert hosts[plain] == hosts[dev], hosts
    assert "from-the-volume" not in hosts[plain] and "the volume's" in hosts[plain], hosts
    assert sh(env, dev, "ls /dev/cdi-zero")[0] == 0


def test_cdi_spec_directories_read_within_a_bound(cdi_env, cdi_dirs):
    """A create reads at most 32 MiB of spec files in all: past it, a clear
    refusal naming the bound, and nothing of the container left; the
    device works again once the files are gone."""
    env, (etc, run) = cdi_env, cdi_dirs
    pb = env.pb
    write(run / "zero.json", zero_spec())
    # nine files just within the 4 MiB a file may be: 35 MiB in all
    pads = [etc / f"pad{i}.json" for i in range(9)]
    for p in pads:
        p.write_text('{"pad": "' + "x" * ((4 << 20) - 200) + '"}')
    pod = env.pod()
    dev = [pb.CDIDevice(name="example.com/zero=z")]
    with pytest.raises(grpc.RpcError) as e:
        sleeper(env, pod, "c", CDI_devices=dev)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert "more than 32 MiB of spec files" in e.value.details(), e.value.details()
    assert containers_left(env) == ([], [], [])
    for p in pads:
        p.unlink()
    cid = sleeper(env, pod, "c", CDI_devices=dev)
    assert sh(env, cid, "test -c /dev/cdi-zero && echo ok")[1] == "ok\n"
