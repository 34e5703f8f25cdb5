"""What every Python benchmark in bench/ needs from a fresh clone: its Debian
packages, a built kinglet, and a way to leave no cgroup behind."""
import os
import pathlib
import subprocess
import sys
import time

SRC = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_KINGLET = SRC / "build" / "default" / "kinglet"


def prepare(name, sets, kinglet=None):
    """Installs what is missing (scripts/install-deps SETS...) and, when
    `kinglet` is the default binary and not built yet, builds it
    (./bootstrap build). Returns the kinglet path."""
    if os.geteuid() != 0:
        sys.exit(f"{name}: needs root")
    subprocess.run([str(SRC / "scripts" / "install-deps"), *sets], check=True)
    path = pathlib.Path(kinglet) if kinglet else DEFAULT_KINGLET
    if not os.access(path, os.X_OK):
        if path != DEFAULT_KINGLET:
            sys.exit(f"{name}: {path} is not an executable kinglet")
        print(f"{name}: building kinglet (./bootstrap build)", file=sys.stderr, flush=True)
        subprocess.run([str(SRC / "bootstrap"), "build"], check=True, stdout=subprocess.DEVNULL)
    return str(path)


def cgroup_mounts():
    """Every cgroup (v1) and cgroup2 mount point of this mount namespace."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split(" ")[0] in ("cgroup", "cgroup2"):
                found.append(left.split(" ")[4].replace("\\040", " "))
    return found


def remove_cgroups(names):
    """Removes the cgroups /NAME (and everything below them) in every
    hierarchy, v1 and v2: runc with the cgroupfs driver makes a pod's
    cgroup parent in each v1 hierarchy. Processes still in them are ours
    (the benchmark made these cgroups): they are killed first."""
    left = []
    for mount in cgroup_mounts():
        for name in names:
            top = os.path.join(mount, name.strip("/"))
            if not os.path.isdir(top):
                continue
            dirs = sorted((dp for dp, _, _ in os.walk(top)), key=len, reverse=True)
            for d in dirs:
                try:
                    with open(os.path.join(d, "cgroup.procs")) as f:
                        for pid in f.read().split():
                            try:
                                os.kill(int(pid), 9)
                            except ProcessLookupError:
                                pass
                except OSError:
                    pass
            for d in dirs:
                for _ in range(200):  # killed processes leave their cgroup shortly
                    try:
                        os.rmdir(d)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.01)
                else:
                    left.append(d)
    if left:
        print(f"warning: could not remove cgroups {left}", file=sys.stderr)
    return not left
