"""`kinglet oci --error-fd N`: a failure also goes to fd N as one binary
error record (src/base/base.h: magic "KER1", code, flags, length,
message), the errno and the message apart, for a caller that maps the
code (the daemon's CreateContainer); the line for people on stderr stays
as it was, with the system's text once."""
import json
import os
import struct
import subprocess

from ocihelpers import *  # noqa: F401,F403 (fixtures)

HEAD = struct.Struct("=IiII")
MAGIC = 0x3152454b
NO_SYS = 1


def with_error_fd(kinglet, *args, **kw):
    """Runs kinglet oci with --error-fd; (result, record or None). The
    record is read once it has exited, without waiting for EOF, as the
    daemon does: a created container's init holds the pipe until its
    execve."""
    r, w = os.pipe()
    try:
        res = kinglet("--error-fd", str(w), *args, pass_fds=(w,), **kw)
        os.close(w)
        w = -1
        os.set_blocking(r, False)
        try:
            data = os.read(r, 4096)
        except BlockingIOError:
            data = b""
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    if not data:
        return res, None
    magic, code, flags, n = HEAD.unpack_from(data)
    assert magic == MAGIC and len(data) == HEAD.size + n, data
    return res, (code, flags, data[HEAD.size:].decode())


def test_missing_bind_source(kinglet, make_bundle, cid, tmp_path):
    src = tmp_path / "nope"

    def edit(c):
        c["mounts"].append({"destination": "/x", "type": "bind", "source": str(src),
                            "options": ["rbind"]})
    b = make_bundle(["true"], edit=edit)
    res, rec = with_error_fd(kinglet, "create", "--bundle", b, cid)
    assert res.returncode == 1
    code, flags, msg = rec
    assert (code, flags) == (2, 0)  # ENOENT, the system's text to be added
    assert msg.startswith(f"create container `{cid}`: ") and f"`{src}`" in msg, msg
    assert "No such file or directory" not in msg
    # for people: as without --error-fd, the system's text once
    line = res.stderr.strip()
    assert line.count("No such file or directory") == 1 and msg in line, line
    assert not (kinglet.root / cid).exists()


def test_failing_hook(kinglet, make_bundle, cid):
    """A hook's failure says it all: EIO without its system text (it said
    "Operation canceled" before, and ECANCELED read as the caller's)."""
    def edit(c):
        c["hooks"] = {"prestart": [{"path": "/bin/sh", "args": ["sh", "-c", "exit 3"]}]}
    b = make_bundle(["true"], edit=edit)
    res, rec = with_error_fd(kinglet, "create", "--bundle", b, cid)
    assert res.returncode == 1
    code, flags, msg = rec
    assert (code, flags) == (5, NO_SYS)
    assert msg.endswith("`hooks.prestart[0]`: hook `/bin/sh`: exit status 3"), msg
    assert res.stderr.strip().endswith("exit status 3"), res.stderr


def test_failing_hook_in_the_init(kinglet, make_bundle, cid):
    """createContainer hooks run in the container's init: their error
    reaches `kinglet oci` over the sync socket, still without system text."""
    def edit(c):
        c["hooks"] = {"createContainer": [{"path": "/bin/sh", "args": ["sh", "-c", "exit 4"]}]}
    b = make_bundle(["true"], edit=edit)
    res, rec = with_error_fd(kinglet, "create", "--bundle", b, cid)
    code, flags, msg = rec
    assert (code, flags) == (5, NO_SYS), rec
    assert msg.endswith("exit status 4"), msg
    assert "Input/output error" not in res.stderr, res.stderr


def test_log_json_and_error_fd_together(kinglet, make_bundle, cid, tmp_path):
    """runc's --log/--log-format json still get the line (for callers that
    read it), and the record comes too."""
    log = tmp_path / "oci.log"
    b = make_bundle(["/no/such/program"])
    res, rec = with_error_fd(kinglet, "--log", log, "--log-format", "json", "create",
                             "--bundle", b, cid)
    assert res.returncode == 1 and res.stderr == ""
    assert rec[:2] == (2, 0) and rec[2].endswith("`process.args[0]`: `/no/such/program`")
    lines = [json.loads(ln) for ln in log.read_text().splitlines()]
    errors = [ln["msg"] for ln in lines if ln["level"] == "error"]
    assert errors == [rec[2] + ": No such file or directory"], lines


def test_success_and_usage(kinglet, make_bundle, cid):
    b = make_bundle(["true"])
    res, rec = with_error_fd(kinglet, "create", "--bundle", b, cid, capture_output=False,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert res.returncode == 0 and rec is None
    kinglet("delete", "--force", cid, check=True)
    # a usage error is a failure too (EINVAL, said in full)
    res, rec = with_error_fd(kinglet, "create")
    assert res.returncode == 2 and rec == (22, NO_SYS, "create: expected one container id")
    # an fd that is not open is refused before anything runs
    res = kinglet("--error-fd", "999", "create", "--bundle", b, cid)
    assert res.returncode == 2 and "--error-fd" in res.stderr
    assert not (kinglet.root / cid).exists()
