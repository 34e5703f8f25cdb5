"""Built-in pod networking (src/net) driven through the net-driver test
program, inside a lab network namespace (see conftest.py): pods reach each
other and the node, host ports answer from an "outside" namespace, IPAM
holds under concurrency and across restarts, teardown leaves nothing."""
import json
import os
import re
import subprocess

import pytest

from .conftest import read_line

V4 = "10.99.0.0/24"
DUAL = "10.99.0.0/24,fd00:99::/64"

# A tiny server run inside a pod: answers each TCP connection (or UDP
# datagram) with the peer's address, so tests can see whether traffic was
# masqueraded.
SERVER = r"""
import socket, sys
proto, fam, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
af = socket.AF_INET6 if fam == "6" else socket.AF_INET
if proto == "sctp":
    s = socket.socket(af, socket.SOCK_STREAM, socket.IPPROTO_SCTP)
else:
    s = socket.socket(af, socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::" if fam == "6" else "0.0.0.0", port))
if proto != "udp":
    s.listen(16)
print("listening", flush=True)
while True:
    if proto != "udp":
        c, peer = s.accept()
        c.sendall(peer[0].encode() + b"\n")
        c.close()
    else:
        data, peer = s.recvfrom(100)
        s.sendto(peer[0].encode() + b"\n", peer)
"""

CLIENT = r"""
import socket, sys
proto, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
af = socket.AF_INET6 if ":" in host else socket.AF_INET
if proto == "sctp":
    s = socket.socket(af, socket.SOCK_STREAM, socket.IPPROTO_SCTP)
else:
    s = socket.socket(af, socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
s.settimeout(float(sys.argv[5]) if len(sys.argv) > 5 else 5)
if len(sys.argv) > 4 and sys.argv[4] != "0":
    s.bind(("", int(sys.argv[4])))
if proto != "udp":
    s.connect((host, port))
    print(s.recv(100).decode().strip())
else:
    s.sendto(b"hi", (host, port))
    print(s.recvfrom(100)[0].decode().strip())
"""

PY = "/usr/bin/python3"


def setup_pod(lab, pod, subnet=V4, ports=(), check=True, ns=None):
    ns = ns or pod
    if not os.path.exists("/proc/%d/root/run/netns/%s" % (lab.pid, ns)):
        lab.run("ip", "netns", "add", ns)
    args = lab.driver_args(subnet) + ["setup", "--pod", pod, "--netns", f"/run/netns/{ns}"]
    for p in ports:
        args += ["--port", p]
    p = lab.run(*args, check=check)
    if not check:
        return p
    return json.loads(p.stdout)


def teardown_pod(lab, pod, subnet=V4):
    lab.run(*lab.driver_args(subnet), "teardown", "--pod", pod)


def ping(lab, ns, addr, check=True):
    return lab.in_ns(ns, "busybox", "ping", "-c", "1", "-W", "3", addr, check=check)


def leases(lab):
    out = lab.run(lab.driver, "--ipam", lab.ipam, "leases").stdout
    return [line.split() for line in out.splitlines() if line.strip()]


def start_server(lab, ns, proto, port, fam="4"):
    p = lab.popen("ip", "netns", "exec", ns, PY, "-c", SERVER, proto, fam, str(port))
    line = read_line(p)
    assert line == "listening", f"server in {ns} did not start: {p.stderr.read1(1000)!r}"
    return p


def client(lab, ns, proto, host, port, check=True):
    args = [PY, "-c", CLIENT, proto, host, str(port)]
    if ns:
        return lab.in_ns(ns, *args, check=check, timeout=20)
    return lab.run(*args, check=check, timeout=20)


def test_two_pods_reach_each_other_and_the_node(lab):
    a = setup_pod(lab, "pod-a")
    b = setup_pod(lab, "pod-b")
    ipa, ipb = a["ips"][0]["addr"], b["ips"][0]["addr"]
    assert ipa != ipb
    assert a["ips"][0]["gateway"] == "10.99.0.1" and a["ips"][0]["prefix"] == 24
    ping(lab, "pod-a", ipb)
    ping(lab, "pod-b", ipa)
    ping(lab, "pod-a", "10.99.0.1")          # the node, through the bridge
    lab.run("busybox", "ping", "-c", "1", "-W", "3", ipa)  # node -> pod
    # the pod side: eth0 with the address and MTU, default route, loopback up
    addr = lab.in_ns("pod-a", "ip", "-o", "addr", "show", "dev", "eth0").stdout
    assert f"inet {ipa}/24" in addr
    link = lab.in_ns("pod-a", "ip", "-o", "link", "show", "dev", "eth0").stdout
    assert "mtu 1500" in link and "UP" in link
    assert "default via 10.99.0.1 dev eth0" in lab.in_ns("pod-a", "ip", "route").stdout
    assert "UP" in lab.in_ns("pod-a", "ip", "-o", "link", "show", "lo").stdout
    ping(lab, "pod-a", "127.0.0.1")
    # the host side: a hairpin port of kinglet0, and the node forwards
    ports = lab.run("bridge", "-d", "link", "show", "dev", a["host_ifname"]).stdout
    assert "master kinglet0" in ports and "hairpin on" in ports
    assert lab.run("cat", "/proc/sys/net/ipv4/ip_forward").stdout.strip() == "1"


def test_dual_stack(lab):
    a = setup_pod(lab, "pod-a", DUAL)
    # one pod id per pod even with two leases
    assert lab.run(*lab.driver_args(DUAL), "pods").stdout.split() == ["pod-a"]
    b = setup_pod(lab, "pod-b", DUAL)
    fams = [ip["family"] for ip in a["ips"]]
    assert fams == [4, 6]
    a6, b6 = a["ips"][1]["addr"], b["ips"][1]["addr"]
    assert a6.startswith("fd00:99::") and a6 != b6
    assert a["ips"][1]["gateway"] == "fd00:99::1"
    ping(lab, "pod-a", b6)
    ping(lab, "pod-a", "fd00:99::1")
    ping(lab, "pod-b", a["ips"][0]["addr"])
    assert "default via fd00:99::1 dev eth0" in lab.in_ns("pod-a", "ip", "-6", "route").stdout
    # an IPv6 host port reaches the pod's IPv6 address
    start_server(lab, "pod-b", "tcp", 80, fam="6")
    lab.run(*lab.driver_args(DUAL), "teardown", "--pod", "pod-b")
    b = setup_pod(lab, "pod-b", DUAL, ports=["tcp:8080:80"])
    out = client(lab, "pod-a", "tcp", "fd00:99::1", 8080).stdout.strip()
    assert out == "fd00:99::1"  # hairpin traffic is masqueraded to the gateway


@pytest.fixture
def outside(lab):
    """An "outside" namespace linked to the node by its own veth pair:
    node 192.0.2.1/24 on out0, outside client 192.0.2.2/24."""
    lab.run("ip", "netns", "add", "outside")
    lab.run("ip", "link", "add", "out0", "type", "veth", "peer", "name", "eth0",
            "netns", "outside")
    lab.run("ip", "addr", "add", "192.0.2.1/24", "dev", "out0")
    lab.run("ip", "link", "set", "out0", "up")
    lab.in_ns("outside", "ip", "addr", "add", "192.0.2.2/24", "dev", "eth0")
    lab.in_ns("outside", "ip", "link", "set", "eth0", "up")
    lab.in_ns("outside", "ip", "link", "set", "lo", "up")
    return "outside"


def test_host_ports_from_outside_hairpin_and_localhost(lab, outside):
    pod = setup_pod(lab, "web", ports=["tcp:8080:80", "udp:5353:53",
                                       "tcp:8081:80:10.99.0.1"])
    ip = pod["ips"][0]["addr"]
    start_server(lab, "web", "tcp", 80)
    start_server(lab, "web", "udp", 53)
    # from outside: DNAT to the pod, and the pod sees the real client
    assert client(lab, outside, "tcp", "192.0.2.1", 8080).stdout.strip() == "192.0.2.2"
    assert client(lab, outside, "udp", "192.0.2.1", 5353).stdout.strip() == "192.0.2.2"
    # host_ip honoured: 8081 exists only on 10.99.0.1, not on 192.0.2.1
    r = client(lab, outside, "tcp", "192.0.2.1", 8081, check=False)
    assert r.returncode != 0
    lab.in_ns(outside, "ip", "route", "add", "10.99.0.0/24", "via", "192.0.2.1")
    assert client(lab, outside, "tcp", "10.99.0.1", 8081).stdout.strip() == "192.0.2.2"
    # another pod through the node's address, and the pod itself (hairpin)
    setup_pod(lab, "other")
    assert client(lab, "other", "tcp", "10.99.0.1", 8080).stdout.strip() == "10.99.0.1"
    assert client(lab, "web", "tcp", "10.99.0.1", 8080).stdout.strip() == "10.99.0.1"
    # from the node itself, on one of its addresses and on localhost
    assert client(lab, None, "tcp", "192.0.2.1", 8080).returncode == 0
    assert client(lab, None, "tcp", "127.0.0.1", 8080).stdout.strip() == "10.99.0.1"
    # egress: masqueraded to the node's address on the way out
    srv = lab.popen("ip", "netns", "exec", outside, PY, "-c", SERVER, "tcp", "4", "9000")
    assert read_line(srv) == "listening"
    assert client(lab, "web", "tcp", "192.0.2.2", 9000).stdout.strip() == "192.0.2.1"
    # teardown removes exactly this pod's rules
    rules = lab.run("nft", "list", "chain", "inet", "kinglet", "hostports").stdout
    assert rules.count('comment "kinglet:web"') == 3
    teardown_pod(lab, "web")
    rules = lab.run("nft", "list", "chain", "inet", "kinglet", "hostports").stdout
    assert "kinglet:web" not in rules
    assert client(lab, outside, "tcp", "192.0.2.1", 8080, check=False).returncode != 0
    assert ip not in " ".join(" ".join(x) for x in leases(lab))


def test_stale_udp_flow_is_forgotten_when_a_port_is_published(lab, outside):
    lab.run(*lab.driver_args(V4), "node-setup")  # conntrack is active from here on
    # a client talks to UDP 5353 before any pod publishes it: nobody answers,
    # and conntrack remembers the flow without DNAT
    r = lab.in_ns(outside, PY, "-c", CLIENT, "udp", "192.0.2.1", "5353", "40000", "1",
                  check=False)
    assert r.returncode != 0
    setup_pod(lab, "dns", ports=["udp:5353:53"])
    start_server(lab, "dns", "udp", 53)
    # the same flow (same source port) now reaches the pod
    r = lab.in_ns(outside, PY, "-c", CLIENT, "udp", "192.0.2.1", "5353", "40000", check=False)
    assert r.returncode == 0 and r.stdout.strip() == "192.0.2.2", r.stderr


def test_sctp_host_port(lab, outside):
    probe = lab.run(PY, "-c", "import socket; socket.socket(socket.AF_INET, "
                    "socket.SOCK_STREAM, socket.IPPROTO_SCTP)", check=False)
    if probe.returncode != 0:
        pytest.skip("this kernel has no SCTP sockets (no sctp module)")
    setup_pod(lab, "sctp", ports=["sctp:9132:132"])
    start_server(lab, "sctp", "sctp", 132)
    assert client(lab, outside, "sctp", "192.0.2.1", 9132).stdout.strip() == "192.0.2.2"


def test_bad_netns_leaves_nothing(lab):
    lab.run("touch", "/run/not-a-netns")
    p = lab.run(*lab.driver_args(V4), "setup", "--pod", "nons", "--netns", "/run/not-a-netns",
                check=False)
    assert p.returncode == 1 and "nons" in p.stderr
    assert leases(lab) == []
    assert not re.search(r"\bkl[0-9a-f]{12}\b", lab.run("ip", "-o", "link").stdout)


def test_node_namespace_is_refused_as_a_pod(lab):
    p = lab.run(*lab.driver_args(V4), "setup", "--pod", "hijack", "--netns",
                "/proc/self/ns/net", check=False)
    assert p.returncode == 1 and "the node's own" in p.stderr
    assert "default" not in lab.run("ip", "route").stdout
    assert leases(lab) == []


def test_teardown_leaves_nothing_and_is_idempotent(lab):
    # someone else's table must survive everything kinglet does
    lab.run("nft", "add table inet other; add chain inet other c; add rule inet other c "
            "tcp dport 1 counter comment \"kinglet:p0\"")
    for i in range(3):
        setup_pod(lab, f"p{i}", DUAL, ports=[f"tcp:{8000 + i}:80", f"sctp:{9000 + i}:90"])
    assert len(leases(lab)) == 6
    lab.run("ip", "netns", "del", "p2")  # the pod's namespace vanished first
    for i in range(3):
        lab.run(*lab.driver_args(DUAL), "teardown", "--pod", f"p{i}")
        lab.run(*lab.driver_args(DUAL), "teardown", "--pod", f"p{i}")  # again: fine
    links = lab.run("ip", "-o", "link").stdout
    assert not re.search(r"\bkl[0-9a-f]{12}\b", links), links
    assert lab.run("ip", "-o", "link", "show", "master", "kinglet0").stdout.strip() == ""
    assert "comment" not in lab.run("nft", "list", "chain", "inet", "kinglet",
                                    "hostports").stdout
    assert leases(lab) == []
    other = lab.run("nft", "list", "table", "inet", "other").stdout
    assert 'comment "kinglet:p0"' in other
    # node teardown removes kinglet's table and bridge, and nothing else
    lab.run(*lab.driver_args(DUAL), "node-teardown")
    assert lab.run("nft", "list", "table", "inet", "kinglet", check=False).returncode != 0
    assert "kinglet0" not in lab.run("ip", "-o", "link").stdout
    assert 'comment "kinglet:p0"' in lab.run("nft", "list", "table", "inet", "other").stdout
    lab.run(*lab.driver_args(DUAL), "node-teardown")  # idempotent


def test_async_teardown_leaves_nothing(lab, outside):
    pods = [setup_pod(lab, f"bg{i}", ports=[f"tcp:{8100 + i}:80"]) for i in range(4)]
    start_server(lab, "bg0", "tcp", 80)
    assert client(lab, outside, "tcp", "192.0.2.1", 8100).stdout.strip() == "192.0.2.2"
    for i in range(4):
        # the driver waits for the background deletion before it exits
        lab.run(*lab.driver_args(V4), "teardown", "--async", "--pod", f"bg{i}")
    assert client(lab, outside, "tcp", "192.0.2.1", 8100, check=False).returncode != 0
    links = lab.run("ip", "-o", "link").stdout
    for p in pods:
        assert p["host_ifname"] not in links
    assert lab.run("ip", "-o", "link", "show", "master", "kinglet0").stdout.strip() == ""
    assert "comment" not in lab.run("nft", "list", "chain", "inet", "kinglet",
                                    "hostports").stdout
    assert leases(lab) == []
    out = lab.run(*lab.driver_args(V4), "bench", "--count", "10", "--async").stdout
    assert "setup+teardown: n=10" in out
    assert leases(lab) == []
    assert not re.search(r"\bkl[0-9a-f]{12}\b", lab.run("ip", "-o", "link").stdout)


def test_fifty_concurrent_allocations_are_distinct(lab):
    # 50 processes at once...
    procs = [lab.popen(*lab.driver_args(V4), "alloc", "--pod", f"proc-{i}") for i in range(50)]
    addrs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        addrs.append(out.decode().strip())
    # ... and 50 threads at once in one process
    out = lab.run(*lab.driver_args(V4), "alloc-threads", "--count", "50").stdout
    addrs += [line.split()[1] for line in out.splitlines()]
    assert len(addrs) == 100 and len(set(addrs)) == 100
    assert all(a.startswith("10.99.0.") and a not in ("10.99.0.0", "10.99.0.1", "10.99.0.255")
               for a in addrs)
    assert len(leases(lab)) == 100


def test_concurrent_pod_setups(lab):
    for i in range(12):
        lab.run("ip", "netns", "add", f"c{i}")
    procs = [lab.popen(*lab.driver_args(V4), "setup", "--pod", f"c{i}", "--netns",
                       f"/run/netns/c{i}", "--port", f"tcp:{7000 + i}:80") for i in range(12)]
    ips = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        ips.append(json.loads(out)["ips"][0]["addr"])
    assert len(set(ips)) == 12
    ping(lab, "c0", ips[11])
    rules = lab.run("nft", "list", "chain", "inet", "kinglet", "hostports").stdout
    assert rules.count("dnat ip to") == 12


def test_concurrent_setups_in_threads_of_one_process(lab):
    # the daemon sets pods up from worker threads: setns per thread, the nft
    # lock and the node preparation must hold under that
    out = lab.run(*lab.driver_args(DUAL), "--port", "tcp:9900:80", "--port", "udp:9901:53",
                  "setup-threads", "--count", "24", timeout=120).stdout
    ips = [line.split()[1] for line in out.splitlines()]
    assert len(ips) == 24 and len(set(ips)) == 24
    # all torn down again (half of them in the background, waited for)
    assert leases(lab) == []
    assert not re.search(r"\bkl[0-9a-f]{12}\b", lab.run("ip", "-o", "link").stdout)
    assert "comment" not in lab.run("nft", "list", "chain", "inet", "kinglet",
                                    "hostports").stdout


def test_ipam_survives_restart(lab):
    a = setup_pod(lab, "keep-a")
    b = setup_pod(lab, "keep-b")
    # a new process (a restarted daemon) reads the leases back
    again = json.loads(lab.run(*lab.driver_args(V4), "ips", "--pod", "keep-a").stdout)
    assert again["ips"][0]["addr"] == a["ips"][0]["addr"]
    assert again["ips"][0]["gateway"] == "10.99.0.1"
    c = setup_pod(lab, "keep-c")
    assert c["ips"][0]["addr"] not in (a["ips"][0]["addr"], b["ips"][0]["addr"])
    teardown_pod(lab, "keep-a")
    assert sorted(x[1] for x in leases(lab)) == ["keep-b", "keep-c"]
    pods = lab.run(*lab.driver_args(V4), "pods").stdout.split()
    assert sorted(pods) == ["keep-b", "keep-c"]
    ping(lab, "keep-b", c["ips"][0]["addr"])


def test_exhausted_pool_is_a_clear_error(lab):
    small = "10.98.0.0/29"  # 5 pod addresses
    for i in range(5):
        setup_pod(lab, f"s{i}", small)
    p = setup_pod(lab, "s5", small, check=False)
    assert p.returncode == 3, p.stderr
    assert "no free address in pod subnet 10.98.0.0/29" in p.stderr
    # the failed setup left nothing behind
    assert len(leases(lab)) == 5
    links = lab.run("ip", "-o", "link", "show", "master", "kinglet0").stdout
    assert len(links.strip().splitlines()) == 5
    assert "eth0" not in lab.in_ns("s5", "ip", "-o", "link").stdout
    teardown_pod(lab, "s2", small)
    setup_pod(lab, "s5", small)


def test_setup_twice_is_refused_and_keeps_the_first(lab):
    a = setup_pod(lab, "twice")
    p = setup_pod(lab, "twice", check=False)
    assert p.returncode == 4 and "already has network" in p.stderr
    assert len(leases(lab)) == 1
    ping(lab, "twice", "10.99.0.1")
    assert a["ips"][0]["addr"] in lab.in_ns("twice", "ip", "addr").stdout


def test_bad_port_mapping_touches_nothing(lab):
    p = setup_pod(lab, "bad", ports=["tcp:80:80:not-an-ip"], check=False)
    assert p.returncode == 1 and "invalid host IP" in p.stderr
    assert leases(lab) == []
    assert "eth0" not in lab.in_ns("bad", "ip", "-o", "link").stdout


def test_status_and_sysctl_in_pod(lab):
    st = lab.run(*lab.driver_args(V4), "status").stdout
    assert st.startswith("not-ready"), st
    lab.run(*lab.driver_args(V4), "node-setup")
    assert lab.run(*lab.driver_args(V4), "status").stdout.strip() == "ready"
    lab.run("ip", "netns", "add", "sys")
    node_before = lab.run("cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start").stdout
    lab.run(lab.driver, "sysctl", "--netns", "/run/netns/sys",
            "net.ipv4.ip_unprivileged_port_start", "80")
    assert lab.in_ns("sys", "cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start"
                     ).stdout.strip() == "80"
    assert lab.run("cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start").stdout == node_before
    p = lab.run(lab.driver, "sysctl", "--netns", "/run/netns/sys", "kernel.shmmax", "1",
                check=False)
    assert p.returncode != 0 and "invalid network sysctl" in p.stderr
    lab.run("nft", "delete", "table", "inet", "kinglet")
    st = lab.run(*lab.driver_args(V4), "status").stdout
    assert "missing" in st


def test_driver_refuses_the_initial_namespace(net_driver):
    try:
        same = os.stat("/proc/self/ns/net").st_ino == os.stat("/proc/1/ns/net").st_ino
    except PermissionError:
        same = os.stat("/proc/self/ns/net").st_ino == 0xEFFFFFF9
    if not same:
        pytest.skip("pytest itself runs outside the initial network namespace")
    p = subprocess.run([net_driver, "status"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "refusing" in p.stderr


def test_setup_and_teardown_timing(lab):
    out = lab.run(*lab.driver_args(V4), "bench", "--count", "20", timeout=120).stdout
    m = re.search(r"setup\+teardown: n=20 median=([0-9.]+)ms", out)
    assert m, out
    print(out)
    assert float(m.group(1)) < 1000
    assert leases(lab) == []
