"""proto/api.proto defines exactly what upstream's CRI v1 defines.

Upstream is cri-api v0.36 as Debian's golang-k8s-cri-api-dev ships it,
fetched by tests/upstream/fetch-cri-api.  Any difference fails, in either
direction: a field, message, enum value or RPC upstream lacks is as wrong
as one we lack, since upstream may later give its number another meaning.
The negative tests mutate a copy of our proto in one place and check that
the comparator fails, naming exactly that place: they prove the check can
fail.

Run with Debian's interpreter: /usr/bin/python3 -m pytest tests/proto
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

REPO = Path(__file__).resolve().parents[2]
OURS = REPO / "proto" / "api.proto"
FETCH = REPO / "tests" / "upstream" / "fetch-cri-api"
COMPARE = REPO / "tests" / "proto" / "compare_descriptors.py"
GEN_STUBS = REPO / "tests" / "gen-stubs"

TIMEOUT = 300  # the first fetch downloads the package index


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True,
                          timeout=TIMEOUT, **kw)


@pytest.fixture(scope="module")
def upstream():
    proc = run([FETCH])
    assert proc.returncode == 0, "fetch-cri-api failed:\n" + proc.stderr
    path = Path(proc.stdout.strip())
    assert path.is_absolute() and path.is_file(), proc.stdout
    return path


def compare(upstream, ours, *opts):
    proc = run([sys.executable, COMPARE, *opts, upstream, ours])
    return proc.returncode, proc.stdout.splitlines(), proc.stderr


def block_span(text, kind, name):
    """Span of `kind name { ... }` (message, enum or service) in text."""
    m = re.search(r"^\s*%s %s\s*\{" % (kind, re.escape(name)), text, re.M)
    assert m, "%s %s not in proto" % (kind, name)
    depth, i = 0, m.end() - 1
    while True:
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return m.start(), i + 1
        i += 1


def mutated(tmp_path, kind, name, old, new):
    """Copy of our proto with `old` replaced by `new` inside one block."""
    text = OURS.read_text()
    start, end = block_span(text, kind, name)
    block = text[start:end]
    assert block.count(old) == 1, "%r not once in %s %s" % (old, kind, name)
    text = text[:start] + block.replace(old, new) + text[end:]
    path = tmp_path / "api.proto"
    path.write_text(text)
    return path


def test_fetch_is_cached_and_stable(upstream):
    proc = run([FETCH])
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == upstream
    assert "package runtime.v1;" in upstream.read_text()


def test_upstream_is_v0_36(upstream):
    # What Debian's package says it is, and what only v0.36 has: env values
    # as bytes (v0.36.3) after the 1.33-1.35 additions.
    source = (upstream.parent / "SOURCE").read_text().split()
    assert source[0] == "golang-k8s-cri-api-dev", source
    assert source[1].startswith("0.36."), source
    text = upstream.read_text()
    assert re.search(r"message KeyValue \{\s*string key = 1;\s*"
                     r"bytes value = 2;", text), "KeyValue.value is not bytes"
    assert "rpc UpdatePodSandboxResources(" in text
    assert "audit_request_id" not in text


def test_ours_is_identical_to_upstream(upstream):
    rc, out, err = compare(upstream, OURS)
    assert rc == 0, "\n".join(out) + err
    assert out and out[-1].startswith("identical:"), out


def test_upstream_is_identical_to_itself(upstream):
    rc, out, err = compare(upstream, upstream)
    assert rc == 0, "\n".join(out) + err


NEGATIVE = [
    pytest.param("message", "ContainerConfig",
                 "LinuxContainerConfig linux = 15;",
                 "LinuxContainerConfig linux = 99;",
                 "runtime.v1.ContainerConfig.linux: number 15 != 99",
                 id="field-number"),
    pytest.param("message", "RunPodSandboxRequest",
                 "string runtime_handler = 2;", "",
                 "runtime.v1.RunPodSandboxRequest.runtime_handler: missing",
                 id="field-removed"),
    pytest.param("enum", "ContainerState",
                 "CONTAINER_EXITED  = 2;", "CONTAINER_EXITED  = 7;",
                 "runtime.v1.ContainerState.CONTAINER_EXITED: number 2 != 7",
                 id="enum-value"),
    pytest.param("service", "RuntimeService",
                 "returns (stream ContainerEventResponse)",
                 "returns (ContainerEventResponse)",
                 "runtime.v1.RuntimeService.GetContainerEvents: "
                 "server_streaming True != False",
                 id="stream-flag"),
    pytest.param("message", "PodSandboxStatus",
                 "int64 created_at = 4;", "int32 created_at = 4;",
                 "runtime.v1.PodSandboxStatus.created_at: "
                 "type TYPE_INT64 != TYPE_INT32",
                 id="field-type"),
    pytest.param("message", "ExecSyncRequest",
                 "repeated string cmd = 2;", "string cmd = 2;",
                 "runtime.v1.ExecSyncRequest.cmd: "
                 "label LABEL_REPEATED != LABEL_OPTIONAL",
                 id="field-label"),
    pytest.param("message", "Image",
                 "Int64Value uid = 5;", "UInt64Value uid = 5;",
                 "runtime.v1.Image.uid: "
                 "type_name .runtime.v1.Int64Value != .runtime.v1.UInt64Value",
                 id="field-type-name"),
    pytest.param("message", "PodSandboxConfig",
                 "map<string, string> labels = 6;",
                 "map<string, int32> labels = 6;",
                 "runtime.v1.PodSandboxConfig.LabelsEntry.value: "
                 "type TYPE_STRING != TYPE_INT32",
                 id="map-value"),
    pytest.param("message", "SecurityProfile",
                 "Localhost = 2;", "Localhost = 3;",
                 "runtime.v1.SecurityProfile.ProfileType.Localhost: "
                 "number 2 != 3",
                 id="nested-enum"),
    pytest.param("service", "ImageService",
                 "rpc PullImage(PullImageRequest) returns (PullImageResponse)",
                 "rpc PullImage(PullImageRequest) returns (ImageStatusResponse)",
                 "runtime.v1.ImageService.PullImage: output_type "
                 ".runtime.v1.PullImageResponse != .runtime.v1.ImageStatusResponse",
                 id="method-output"),
    pytest.param("message", "Mount",
                 "repeated IDMapping uidMappings = 6;",
                 "repeated IDMapping uid_mappings = 6;",
                 ["runtime.v1.Mount.uidMappings: missing",
                  "runtime.v1.Mount.uid_mappings: not in upstream"],
                 id="field-renamed"),
]


# Additions fail too, each kind named by its full name.
ADDITIONS = [
    pytest.param("message", "ExecRequest", "bool stderr = 6;",
                 "bool stderr = 6;\n    string audit_request_id = 7;",
                 "runtime.v1.ExecRequest.audit_request_id: not in upstream",
                 id="added-field"),
    pytest.param("message", "AttachRequest", "bool stderr = 5;",
                 "bool stderr = 5;\n    string audit_request_id = 6;",
                 "runtime.v1.AttachRequest.audit_request_id: not in upstream",
                 id="added-field-attach"),
    pytest.param("message", "VersionRequest", "string version = 1;",
                 "string version = 1;\n    message Extra {}",
                 "runtime.v1.VersionRequest.Extra: not in upstream",
                 id="added-nested-message"),
    pytest.param("enum", "ContainerState", "CONTAINER_UNKNOWN = 3;",
                 "CONTAINER_UNKNOWN = 3;\n    CONTAINER_PAUSED = 4;",
                 "runtime.v1.ContainerState.CONTAINER_PAUSED: not in upstream",
                 id="added-enum-value"),
    pytest.param("service", "ImageService",
                 "rpc ImageFsInfo(ImageFsInfoRequest)",
                 "rpc Extra(ImageFsInfoRequest) returns (ImageFsInfoResponse) {}\n"
                 "    rpc ImageFsInfo(ImageFsInfoRequest)",
                 "runtime.v1.ImageService.Extra: not in upstream",
                 id="added-rpc"),
]


@pytest.mark.parametrize("kind,name,old,new,expected", NEGATIVE + ADDITIONS)
def test_mutation_is_caught(upstream, tmp_path, kind, name, old, new,
                            expected):
    path = mutated(tmp_path, kind, name, old, new)
    rc, out, err = compare(upstream, path)
    assert rc == 1, "comparator passed a mutated proto:\n" + "\n".join(out)
    expected = expected if isinstance(expected, list) else [expected]
    assert out == expected, "\n".join(out)
    assert "%d difference(s)" % len(expected) in err


def test_top_level_addition_is_caught(upstream, tmp_path):
    path = tmp_path / "api.proto"
    path.write_text(OURS.read_text() + "\nmessage Extra {}\nenum Other { O = 0; }\n")
    rc, out, _ = compare(upstream, path)
    assert rc == 1
    assert sorted(out) == ["runtime.v1.Extra: not in upstream",
                           "runtime.v1.Other: not in upstream"], out


def test_broken_proto_is_an_error(upstream, tmp_path):
    path = tmp_path / "api.proto"
    path.write_text(OURS.read_text().replace("syntax = ", "syntax == ", 1))
    rc, out, err = compare(upstream, path)
    assert rc == 2
    assert "protoc failed" in err


@pytest.mark.skipif(shutil.which("protoc-c") is None,
                    reason="protoc-c not installed (protobuf-c-compiler)")
def test_ours_builds_with_protobuf_c(tmp_path):
    # What the daemon's build does with proto/api.proto (it compiles with
    # -std=gnu11).  GNU C modes predefine the macro `linux` (= 1), which
    # breaks the generated structs' many fields named linux: the build
    # needs -Ulinux (or a strict -std=c11).
    proc = run(["protoc-c", "--c_out=%s" % tmp_path,
                "-I%s" % OURS.parent, OURS.name])
    assert proc.returncode == 0, proc.stderr
    cc = os.environ.get("CC", "cc")
    proc = run([cc, "-std=gnu11", "-Ulinux", "-Wall", "-Wextra", "-Werror",
                "-c", tmp_path / "api.pb-c.c", "-I%s" % tmp_path,
                "-o", tmp_path / "api.pb-c.o"])
    assert proc.returncode == 0, proc.stderr


def test_stubs_are_built_from_upstream(upstream, tmp_path):
    proc = run([GEN_STUBS, tmp_path / "stubs"])
    assert proc.returncode == 0, proc.stderr
    out = Path(proc.stdout.strip())
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import api_pb2, api_pb2_grpc\n"
        "assert hasattr(api_pb2_grpc, 'RuntimeServiceStub')\n"
        "assert hasattr(api_pb2_grpc, 'ImageServiceStub')\n"
        "sys.stdout.buffer.write(api_pb2.DESCRIPTOR.serialized_pb)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe, str(out)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr.decode()
    stubs = descriptor_pb2.FileDescriptorProto.FromString(proc.stdout)

    desc = tmp_path / "upstream.pb"
    proc = run(["protoc", "-I%s" % upstream.parent,
                "--descriptor_set_out=%s" % desc, upstream.name])
    assert proc.returncode == 0, proc.stderr
    fds = descriptor_pb2.FileDescriptorSet.FromString(desc.read_bytes())
    want = fds.file[0]
    # The Python generator leaves json_name out of what it embeds.
    clear_json_names(want.message_type)
    assert stubs == want, "stubs are not built from upstream's proto"


def clear_json_names(messages):
    for m in messages:
        for f in m.field:
            f.ClearField("json_name")
        clear_json_names(m.nested_type)
