"""Drives corenode's JSON gateway with python3-etcd3gw (Debian's package),
a client that speaks only HTTP/JSON. Each step asserts; the script exits 0
only if every check held.

Usage: python3 etcd3gw_check.py HOST PORT [HOST PORT ...]
"""
import sys
import threading
import time

from etcd3gw.client import Etcd3Client
from etcd3gw.watch import Watcher

passed = 0


def check(cond, what):
    global passed
    if not cond:
        print("etcd3gw: check failed after %d held: %s" % (passed, what), flush=True)
        sys.exit(1)
    passed += 1


args = sys.argv[1:]
# etcd3gw 2.0 defaults to /v3alpha/, which etcd 3.6 no longer serves either.
members = [Etcd3Client(host=args[i], port=int(args[i + 1]), timeout=10, api_path="/v3/") for i in range(0, len(args), 2)]
a, b = members[0], members[-1]

# Status and members, as Patroni discovers the cluster.
check(b.status()["version"].startswith("3."), "status version")
check(len(a.members()) == len(members), "member list has every member")

# KV through one member, read through another.
check(a.put("/py/k1", "v1"), "put")
check(b.get("/py/k1") == [b"v1"], "get through another member")
check(a.create("/py/k1", "other") is False, "create of an existing key fails")
check(a.create("/py/k2", "v2") is True, "create of a new key")
check(sorted(v for v, _ in b.get_prefix("/py/")) == [b"v1", b"v2"], "get_prefix")
check(a.replace("/py/k1", "v1", "v1b") is True, "compare-and-swap that holds")
check(a.replace("/py/k1", "v1", "v1c") is False, "compare-and-swap that does not")
check(b.get("/py/k1") == [b"v1b"], "value after compare-and-swap")

# Leases: keys vanish on revoke.
lease = a.lease(ttl=30)
check(a.put("/py/leased", "x", lease=lease), "put with a lease")
check(lease.ttl() > 0, "lease TTL")
check(lease.refresh() == 30, "keep-alive answers the granted TTL")
check(lease.keys() == [b"/py/leased"], "lease keys")
check(lease.revoke(), "revoke")
check(b.get("/py/leased") == [], "the revoked lease's key is gone")

# A watch is a streaming response; events arrive while it stays open.
events, ready = [], threading.Event()


def on_event(ev):
    events.append(ev)
    ready.set()


watcher = Watcher(b, "/py/w", on_event)
time.sleep(0.5)  # etcd3gw offers no "created" callback
check(a.put("/py/w", "1"), "put to a watched key")
check(ready.wait(10), "watch event arrives")
check(events[0]["kv"]["value"] == b"1", "watch event value: %r" % events)
watcher.stop()

# A lock (etcd3gw builds it from a lease and a transaction).
lock = a.lock("py-lock", ttl=30)
check(lock.acquire(), "lock acquired")
check(lock.is_acquired(), "lock held")
check(not b.lock("py-lock", ttl=30).acquire(), "a second holder is refused")
check(lock.release(), "lock released")
check(b.lock("py-lock", ttl=30).acquire(), "the released lock can be taken again")

check(a.delete_prefix("/py/"), "delete_prefix")
check(b.get_prefix("/py/") == [], "nothing left under the prefix")
print("etcd3gw: all %d checks held" % passed)
