#!/usr/bin/python3
"""The control plane's leaders cut off from the etcd majority on the network lab
(deploy/netlab.py), with their clients still beside them:

  leaf L00's uplink cut       L00 holds the fs3-mgmtd leader, the hai-server leader, an fs3-meta
                              server and one etcd member of three: a minority. Within their
                              leases the cut-off leaders stop serving as leaders (a client on L00
                              is told "not the leader"); the replicas on the other side, with the
                              etcd majority, are elected and serve; the fs3-meta server beside
                              them takes every create a client there makes
  healed                      exactly one leader of each (the new one), the old ones follow it,
                              nothing written on the majority side is lost or overwritten (the old
                              leaders' writes are fenced), fs3's namespace is consistent

Hosts: zone A with leaves L00 and L01 (two hosts each), zone B with leaf R (two hosts). etcd on
L00-n01, L01-n00 and R-n00; fs3-mgmtd, fs3-meta and hai-server on L00-n00 (elected first) and on
L01-n01; one fs3-storage on R-n01. Root only (namespaces). Usage: tests/deploy/netlab_ha_test.py BUILD_DIR
"""

import json
import os
import time

from labtest import fail, lab, say, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ffdeploy.daemons import etcd_members, fs3_meta, fs3_mgmtd, fs3_storage, hai_server, start_etcd  # noqa: E402

TOPOLOGY = """
name = "ha"
node_link_gbps = 200
cross_zone_gbps = 200
[[zones]]
name = "A"
  [[zones.leaves]]
  name = "L"          # L00, L01
  count = 2
  nodes = 2
  gpus_per_node = 1
  uplink_gbps = 200
[[zones]]
name = "B"
  [[zones.leaves]]
  name = "R"
  count = 1
  nodes = 2
  gpus_per_node = 1
  uplink_gbps = 200
"""

CUT_SIDE, FAR_SIDE = "L00-n00", "L01-n01"   # the first leaders; their successors
CLIENT_CUT, CLIENT_FAR = "L00-n01", "L01-n00"
ETCD_HOSTS = ["L00-n01", "L01-n00", "R-n00"]
STORAGE = "R-n01"
TTL = 2



def main():
    with lab("nlh", TOPOLOGY, queue_kb=256, needs=("etcd", "etcdctl")) as (c, build, tmp, toml):
        d = os.path.join(c.work, "ha")
        ns = {n: ["ip", "netns", "exec", c.hosts[n]["netns"]] for n in c.hosts}
        members = etcd_members(d, 3, names=[(f"etcd-{n}", c.address(n), ns[n]) for n in ETCD_HOSTS])
        etcd = start_etcd(members)
        c.daemons.extend(members)
        say(f"etcd: {etcd}")
        engine = {"engine": "etcd", "etcd_endpoints": etcd.split(","), "data_dir": None}
        fs3_bin, hai_bin = os.path.join(build, "fs3"), os.path.join(build, "platform")
        mgmtd, meta, server = {}, {}, {}
        for node in (CUT_SIDE, FAR_SIDE):  # the cut side's start first and lead
            a = c.address(node)
            mgmtd[node] = c.start(node, fs3_mgmtd(fs3_bin, d, name=f"mgmtd-{node}", listen=f"{a}:0",
                                                  metrics=False, election_ttl_s=TTL, **engine)).rpc
            meta[node] = c.start(node, fs3_meta(fs3_bin, d, None, 1 << 20, name=f"meta-{node}",
                                                listen=f"{a}:0", metrics=False, **engine)).rpc
            server[node] = c.start(node, hai_server(
                hai_bin, d, os.path.abspath(toml), f"{a}:0", name=f"server-{node}",
                data_dir=os.path.join(d, f"server-{node}"), engine="etcd",
                etcd_endpoints=etcd.split(","), election_ttl_s=TTL)).rpc

        def fail_with_logs(msg):
            """Fails with the replicas' election history and the etcd members' last words."""
            for daemon in c.daemons:
                lines = daemon.log_tail(200000).splitlines()
                if daemon.name.startswith("etcd"):
                    lines = lines[-8:]
                else:
                    lines = [ln for ln in lines if "election" in ln or "leader" in ln][-12:]
                if lines:
                    say(f"--- {daemon.name}:\n" + "\n".join(ln[:400] for ln in lines))
            fail(msg)
            if node == CUT_SIDE:
                wait_for("the first hai-server to lead", lambda: os.path.exists(
                    os.path.join(d, f"server-{CUT_SIDE}", "admin.token")), 20)
                time.sleep(1)
        with open(os.path.join(d, f"server-{CUT_SIDE}", "admin.token")) as f:
            admin = f.read().strip()
        mgmtds = ",".join(mgmtd.values())
        # One storage service (on R) and the chains, so that fs3 clients connect.
        c.start(STORAGE, fs3_storage(fs3_bin, d, STORAGE, mgmtds, [(11, os.path.join(d, "t11"))],
                                     name="storage", listen=f"{c.address(STORAGE)}:0",
                                     metrics=False))
        wait_for("the storage service to register",
                 lambda: '"up"' in c.run(STORAGE, "fs3", "--mgmtd", mgmtds, "nodes", "--json"), 20)
        c.run(STORAGE, "fs3", "--mgmtd", mgmtds, "init", "--chunk-size", "1MiB",
              "--replication", "1")
        metas = ",".join(meta.values())
        servers = ",".join(server.values())

        def fs3(node, mgmtd_list, *args):
            try:
                return json.loads(c.run(node, "fs3", "--mgmtd", mgmtd_list, *args, "--json",
                                        timeout=30))
            except (RuntimeError, ValueError):
                return None

        def hai(node, server_list, *args):
            try:
                return c.run(node, "hai", *args, timeout=30,
                             env={"HAI_SERVER": server_list, "HAI_TOKEN": admin, "HOME": c.work})
            except RuntimeError as e:
                return e

        def namespace(node, code):
            """Runs Python `code` with `fs` (fs3client over both fs3-meta servers) in NODE's host;
            its stdout, or None when it failed."""
            script = "import fs3client; fs = fs3client.FileSystem(%r, %r)\n%s" % (
                metas, mgmtds, code)
            try:
                return c.run(node, os.path.join(ROOT, ".venv", "bin", "python"), "-c", script,
                             env={"PYTHONPATH": os.path.join(build, "python")}, timeout=60)
            except RuntimeError as e:
                say(f"fs3client on {node}: {e}")
                return None

        def leads_mgmtd(node):
            return fs3(CLIENT_CUT if node == CUT_SIDE else CLIENT_FAR, mgmtd[node], "nodes") is not None

        def leads_hai(node):
            out = hai(CLIENT_CUT if node == CUT_SIDE else CLIENT_FAR, server[node], "whoami")
            return not isinstance(out, Exception)

        wait_for("fs3-mgmtd on the cut side to lead", lambda: leads_mgmtd(CUT_SIDE), 20)
        wait_for("hai-server on the cut side to lead", lambda: leads_hai(CUT_SIDE), 20)
        if leads_mgmtd(FAR_SIDE) or leads_hai(FAR_SIDE):
            fail("two leaders before the cut")
        before = fs3(CLIENT_FAR, mgmtds, "nodes")
        say("leaders on L00; cutting L00's uplink (L00 keeps one etcd member of three)")

        c.lab.cut("L00")
        cut_at = time.monotonic()
        wait_for("the cut-off fs3-mgmtd to stop leading",
                 lambda: not leads_mgmtd(CUT_SIDE), TTL + 10)
        wait_for("the cut-off hai-server to stop leading", lambda: not leads_hai(CUT_SIDE), TTL + 10)
        stepped_down = time.monotonic() - cut_at
        wait_for("fs3-mgmtd on L01 to lead", lambda: leads_mgmtd(FAR_SIDE), 20)
        wait_for("hai-server on L01 to lead", lambda: leads_hai(FAR_SIDE), 20)
        took_over = time.monotonic() - cut_at
        say(f"cut-off leaders stepped down within {stepped_down:.1f} s; successors lead after "
            f"{took_over:.1f} s")
        msg = hai(CLIENT_CUT, server[CUT_SIDE], "whoami")
        if not isinstance(msg, Exception) or "not the leader" not in str(msg):
            fail(f"the cut-off hai-server does not say it is not the leader: {msg}")
        # Work on the majority side: files through both fs3-meta servers (the cut-off one is
        # passed over), a user added on the new hai-server leader.
        created = [f"during-{i}" for i in range(20)]
        if namespace(CLIENT_FAR, "for n in %r: fs.mkdir('/' + n)" % created) is None:
            fail("creating directories on the majority side failed")
        r = hai(CLIENT_FAR, servers, "admin", "user", "add", "during-cut", "--json")
        if isinstance(r, Exception):
            fail(f"adding a user on the majority side: {r}")
        say(f"majority side: {len(created)} files created, a user added")

        c.lab.heal("L00")
        say("healed")
        time.sleep(TTL + 2)
        # Exactly one leader of each: the new one.
        for daemon, leads in (("fs3-mgmtd", leads_mgmtd), ("hai-server", leads_hai)):
            if not leads(FAR_SIDE):
                fail_with_logs(f"after the heal, {daemon} on {FAR_SIDE} (elected in the cut) no "
                               "longer leads")
            if leads(CUT_SIDE):
                fail_with_logs(f"after the heal, {daemon} on {CUT_SIDE} (cut off) leads too")
        after = fs3(CLIENT_CUT, mgmtds, "nodes")
        if after is None:
            fail("fs3-mgmtd unreachable from L00 after the heal")
        users = hai(CLIENT_CUT, servers, "admin", "user", "ls")
        if isinstance(users, Exception) or "during-cut" not in users:
            fail(f"the user added during the cut is missing: {users}")
        listing = namespace(CLIENT_CUT, "print('\\n'.join(fs.listdir('/')))") or ""
        missing = [p for p in created if p not in listing.split()]
        if missing:
            fail(f"files created during the cut are missing after the heal: {missing[:5]}")
        fsck = c.run(CLIENT_CUT, "fs3", "fsck", "--meta", metas, timeout=60)
        if "clean" not in fsck:
            fail(f"fsck after the heal: {fsck}")
        say(f"routing {before and 'known' or '?'} before, known after; users and files kept; "
            "fsck clean")
        print("PASS")


if __name__ == "__main__":
    main()
