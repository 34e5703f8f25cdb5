"""kinglet's nftables table, built as netlink messages (src/net/nft.c),
against what nft(8) makes of the rule text kinglet used to hand to
libnftables: the same ruleset, listed by nft the same way. And every change
is one transaction: one the kernel refuses leaves the table as it was."""
import ipaddress
import json
import re

import pytest

from .test_net import setup_pod, teardown_pod

T = "inet kinglet"


def old_text(subnets, pods):
    """The nft commands of the former text builder (net_nft_base_build and
    net_nft_pod_build before libnftnl), for these subnets and pods:
    [(pod id, [addresses]), [(proto, host port, container port, host ip)])]."""
    out = [f"add table {T}", f"add chain {T} hostports",
           f"add chain {T} prerouting {{ type nat hook prerouting priority -100; "
           "policy accept; }",
           f"flush chain {T} prerouting",
           f"add rule {T} prerouting fib daddr type local jump hostports",
           f"add chain {T} output {{ type nat hook output priority -100; policy accept; }}",
           f"flush chain {T} output",
           f"add rule {T} output ip6 daddr ::1 return",
           f"add rule {T} output fib daddr type local jump hostports",
           f"add chain {T} postrouting {{ type nat hook postrouting priority 100; "
           "policy accept; }",
           f"flush chain {T} postrouting",
           f"add rule {T} postrouting ct status dnat ip saddr 127.0.0.0/8 masquerade"]
    for s in subnets:
        ip = "ip" if ipaddress.ip_network(s).version == 4 else "ip6"
        out.append(f"add rule {T} postrouting ct status dnat {ip} saddr {s} {ip} daddr {s} "
                   "masquerade")
        out.append(f"add rule {T} postrouting {ip} saddr {s} {ip} daddr != {s} masquerade")
    for pod, addrs, ports in pods:
        for proto, hp, cp, hip in ports:
            # 0.0.0.0 and :: mean every address, as with kubelet
            unspec = not hip or ipaddress.ip_address(hip).is_unspecified
            hfam = 0 if unspec else ipaddress.ip_address(hip).version
            for a in addrs:
                fam = ipaddress.ip_address(a).version
                if hfam and hfam != fam:
                    continue
                ip = "ip" if fam == 4 else "ip6"
                match = f"{ip} daddr {hip}" if hfam else f"meta nfproto ipv{fam}"
                to = f"{a}:{cp}" if fam == 4 else f"[{a}]:{cp}"
                out.append(f"add rule {T} hostports {match} meta l4proto {proto} th dport {hp} "
                           f'dnat {ip} to {to} comment "kinglet:{pod}"')
    return "\n".join(out) + "\n"


def port_arg(proto, hp, cp, hip):
    if not hip:
        return f"{proto}:{hp}:{cp}"
    return f"{proto}:{hp}:{cp}:[{hip}]" if ":" in hip else f"{proto}:{hp}:{cp}:{hip}"


def without_handles(listing):
    """nft -j output with what depends on history (handles) left out."""
    def strip(o):
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k != "handle"}
        if isinstance(o, list):
            return [strip(v) for v in o]
        return o
    return [strip(x) for x in json.loads(listing)["nftables"] if "metainfo" not in x]


@pytest.mark.parametrize("subnet", ["10.99.0.0/24,fd00:99::/64", "10.96.0.0/12,fd00:90::/60"])
def test_ruleset_is_what_nft_makes_of_the_old_text(lab, subnet):
    subnets = subnet.split(",")
    gw4 = str(ipaddress.ip_network(subnets[0])[1])
    pods = []
    for pod, ports in (
            ("web", [("tcp", 8080, 80, ""), ("udp", 5353, 53, ""), ("tcp", 8081, 81, gw4),
                     ("tcp", 8082, 82, "fd00:99::1"), ("sctp", 9, 9, "0.0.0.0")]),
            ("db", [("tcp", 5432, 5432, ""), ("udp", 65535, 1, "::")])):
        res = setup_pod(lab, pod, subnet, [port_arg(*p) for p in ports])
        pods.append((pod, [ip["addr"] for ip in res["ips"]], ports))
    lab.run("ip", "netns", "add", "ref")
    lab.in_ns("ref", "nft", "-f", "-", input=old_text(subnets, pods))
    got = lab.run("nft", "list", "table", "inet", "kinglet").stdout
    want = lab.in_ns("ref", "nft", "list", "table", "inet", "kinglet").stdout
    assert got == want
    got = lab.run("nft", "-j", "list", "table", "inet", "kinglet").stdout
    want = lab.in_ns("ref", "nft", "-j", "list", "table", "inet", "kinglet").stdout
    assert without_handles(got) == without_handles(want)

    # Teardown deletes exactly the pod's rules: not another pod's, not a
    # rule whose comment only starts the same.
    lab.run("nft", "add", "rule", "inet", "kinglet", "hostports", "tcp", "dport", "1",
            "accept", "comment", '"kinglet:webx"')
    teardown_pod(lab, "web", subnet)
    got = lab.run("nft", "list", "chain", "inet", "kinglet", "hostports").stdout
    assert "kinglet:web\"" not in got and got.count('"kinglet:webx"') == 1
    assert got.count('"kinglet:db"') == 4
    ref_db = old_text(subnets, [pods[1]])
    lab.in_ns("ref", "sh", "-c", "nft delete table inet kinglet && nft -f -", input=ref_db)
    lab.in_ns("ref", "nft", "add", "rule", "inet", "kinglet", "hostports", "tcp", "dport", "1",
              "accept", "comment", '"kinglet:webx"')
    want = lab.in_ns("ref", "nft", "list", "table", "inet", "kinglet").stdout
    # the same rules; only the order of the hand-made one differs
    key = lambda text: sorted(text.splitlines())  # noqa: E731
    assert key(lab.run("nft", "list", "table", "inet", "kinglet").stdout) == key(want)


def test_refused_transaction_leaves_the_table_as_it_was(lab):
    subnet = "10.99.0.0/24"
    setup_pod(lab, "first", subnet, ["tcp:8080:80"])
    # Turn the postrouting base chain into a regular chain: the next
    # transaction's "add chain postrouting { type nat hook ... }" is refused
    # by the kernel, after its flush of prerouting, its new rules and its
    # pod's DNAT rules were accepted.
    lab.sh("nft flush chain inet kinglet postrouting && "
           "nft delete chain inet kinglet postrouting && "
           "nft add chain inet kinglet postrouting && "
           "nft add rule inet kinglet postrouting counter comment '\"mine\"'")
    before = lab.run("nft", "-j", "-a", "list", "ruleset").stdout
    p = setup_pod(lab, "second", subnet, ["tcp:8090:90"], check=False)
    assert p.returncode != 0
    # the message the kernel refused, with its errno (EEXIST before Linux
    # 6.x, EOPNOTSUPP since)
    assert re.search(r"add chain `postrouting`: .*\(errno (17|95)\)", p.stderr), p.stderr
    after = lab.run("nft", "-j", "-a", "list", "ruleset").stdout
    # handles included: a flush and refill would have renumbered the rules
    assert json.loads(after) == json.loads(before)
    # and the first pod's removal still works on that table
    teardown_pod(lab, "first", subnet)
    assert "kinglet:first" not in lab.run("nft", "list", "table", "inet", "kinglet").stdout
