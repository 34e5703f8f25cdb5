"""Waiting on conditions, never on elapsed time: for the tests and for the
scripts they run in a container's network namespace (which put this
directory on sys.path). Standard library only."""
import socket
import time


def wait_for(cond, timeout=60.0, interval=0.01, what="condition"):
    """cond()'s first true value, asked every `interval` seconds; an
    AssertionError naming `what` if none comes within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def tcp_gone(s):
    """The peer closed or reset the connection: TCP_INFO's state is no
    longer ESTABLISHED (1) or SYN_SENT (2)."""
    return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0] not in (1, 2)
