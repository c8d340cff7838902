"""The whole stack on this machine, from one config (deploy/config/local-cluster.toml), with all
its state under one folder; every daemon is started by ffdeploy.daemons (deploy/ffdeploy/daemons.py):
  fs3: fs3-mgmtd, fs3-meta, FS3_STORAGE_SERVICES fs3-storage services in chains of
       FS3_REPLICATION, and (as root, with /dev/fuse) the fs3-fuse mount at DIR/fs3-mnt
       (ffdeploy.fs3_local, in DIR/fs3);
  HAI-Platform: hai-server, one hai-agent and one hai-health per node of CLUSTER_TOML (each node
       has its own HFReduce node id, so a multi-node job crosses HFReduce's network path), and
       hai-web, the read-only web view;
  Prometheus (Debian's `prometheus`) scraping every daemon's /metrics, with deploy/prometheus's
       alert rules loaded.
Jobs see the stack's Python side (haiscale, hai_job, fs3client) and FS3_META / FS3_MGMTD /
FS3_MOUNT without extra steps. With [cluster] tls = true (the default) every gRPC call is over mutual
TLS (common/tls.h), with an authority and a certificate made in DIR/tls; DIR/env hands them to
the CLIs (FF_TLS_*).

  deploy/local-cluster.sh up [DIR] [--config FILE] [--netlab NAME] [--ha]
                                                    # default DIR: /tmp/fireflyer-local
  source DIR/env                                    # HAI_SERVER, HAI_TOKEN (user "researcher"),
                                                    # HAI_WEB_URL, FS3_*, PROMETHEUS_URL;
                                                    # DIR/admin.env: the admin's
  deploy/local-cluster.sh status [DIR]              # every service and its health
  deploy/local-cluster.sh down [DIR] [--purge]      # stops everything (jobs too), unmounts;
                                                    # --purge also removes DIR
--netlab NAME: on the network lab of that name (deploy/netlab.py up CLUSTER_TOML --name NAME, with
the config's CLUSTER_TOML): every node's hai-agent and hai-health in its own host, hai-server,
hai-web, Prometheus, fs3-mgmtd, fs3-meta and fs3-fuse in the first node's, the fs3-storage
services in the other nodes' hosts, each bound to its host's address, so that every byte of
HFReduce and fs3 crosses the emulated switches. The hosts have no route to this machine's own
network: DIR/env then defines `hai` and `fs3` as commands that run in the first node's host.
--ha: no single point of failure in the control plane: three etcd members (etcd1..etcd3, Debian's
etcd-server), two fs3-mgmtd replicas and two fs3-meta servers on it (fs3/: mgmtd, mgmtd2, meta,
meta2), two hai-servers (hai-server, hai-server2; one leads, the other stands by); every client is
given both addresses of each (HAI_SERVER, FS3_MGMTD and FS3_META are lists). Any one of them can
be killed -9 and the cluster goes on. Not with --netlab.
`start` and `stop` are `up` and `down --purge`. `down` works on a crashed or half-started cluster
too: it acts on whatever daemons, pid files and mounts it finds.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request

from ffdeploy import daemons, fs3_local, read_cluster, source_root
from ffdeploy.daemons import (
    Daemon,
    etcd_members,
    hai_agent,
    hai_health,
    hai_server,
    hai_web,
    netlab_address,
    netlab_prefix,
    start_etcd,
    stop_all,
)
from ffdeploy.fs3_local import Fail

ROOT = source_root()


def say(message):
    print(f"local-cluster: {message}", file=sys.stderr)


# Every setting of the local cluster's config (TOML, deploy/config/local-cluster.toml): its
# section and key, type, default (the one place defaults live) and the name the code uses.
SETTINGS = [
    ("cluster", "topology", str, "deploy/config/cluster-local.toml", "CLUSTER_TOML"),
    ("cluster", "gpus_per_node", int, 2, "GPUS_PER_NODE"),
    ("cluster", "tls", bool, True, "TLS"),
    ("fs3", "enabled", bool, True, "FS3"),
    ("fs3", "storage_services", int, 3, "FS3_STORAGE_SERVICES"),
    ("fs3", "replication", int, 3, "FS3_REPLICATION"),
    ("health", "interval_ms", int, 2000, "HEALTH_INTERVAL_MS"),
    ("health", "expect_gpus", int, 0, "HEALTH_EXPECT_GPUS"),
    ("health", "min_free_disk_mib", int, 512, "HEALTH_MIN_FREE_DISK_MIB"),
    ("health", "validator_interval_s", int, 600, "HEALTH_VALIDATOR_INTERVAL_S"),
    ("prometheus", "enabled", bool, True, "PROMETHEUS"),
    ("prometheus", "scrape_interval", str, "2s", "SCRAPE_INTERVAL"),
]


def read_config(path):
    """The config file (TOML) over SETTINGS' defaults, strictly: an unknown section or key, or a
    value of the wrong type, is an error naming the file and the key (exit 78, as the daemons').
    The environment's FS3, PROMETHEUS and TLS (0: leave out) apply over it. Values come back as
    strings by the code's names ("1"/"0" for booleans)."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise Fail(f"{path}: cannot read: {e.strerror}", 78) from None
    except tomllib.TOMLDecodeError as e:
        raise Fail(f"{path}: {e}", 78) from None
    known = {}
    for section, key, kind, default, name in SETTINGS:
        known.setdefault(section, {})[key] = (kind, default, name)
    values = {}
    for section, keys in data.items():
        if section not in known or not isinstance(keys, dict):
            raise Fail(f"{path}: unknown section [{section}] (known: {', '.join(known)})", 78)
        for key in keys:
            if key not in known[section]:
                raise Fail(f"{path}: unknown key {section}.{key} (known: {', '.join(known[section])})", 78)
    for section, key, kind, default, name in SETTINGS:
        value = data.get(section, {}).get(key, default)
        if type(value) is not kind:  # (bool is an int to isinstance)
            kind_name = {str: "a string", int: "an integer", bool: "true or false"}[kind]
            raise Fail(f"{path}: {section}.{key} must be {kind_name}, got {value!r}", 78)
        values[name] = ("1" if value else "0") if kind is bool else str(value)
    for key in ("FS3", "PROMETHEUS", "TLS"):
        if os.environ.get(key) in ("0", "1"):
            values[key] = os.environ[key]
    return values


def node_names(cluster_toml, hai_sim):
    """The nodes of a cluster.toml as hai-server names them (ffdeploy.read_cluster)."""
    try:
        topology = read_cluster(cluster_toml, hai_sim)
    except FileNotFoundError as e:
        raise Fail(str(e)) from None
    except ValueError as e:
        raise Fail(str(e), 78) from None
    return [node["name"] for zone in topology["zones"] for leaf in zone["leaves"]
            for node in leaf["nodes"]]


class LocalCluster:
    def __init__(self, directory, config_path, lab, ha=False):
        self.dir = os.path.abspath(directory)
        self.config_path = config_path
        self.lab = lab
        self.ha = ha
        build = os.environ.get("FF_BUILD_DIR", "build")
        self.build = build if os.path.isabs(build) else os.path.join(ROOT, build)

    def place(self, node):
        """(prefix, address) of a service on `node`: its host of the lab, or here."""
        if not self.lab:
            return [], "127.0.0.1"
        return netlab_prefix(self.lab, node), netlab_address(self.lab, node)

    def bin(self, part, name):
        return os.path.join(self.build, part, name)

    # ---- up ----------------------------------------------------------------------------------
    def up(self):
        c = read_config(self.config_path)
        for b in ("hai-server", "hai-agent", "hai", "hai-health", "hai-web"):
            if not os.access(self.bin("platform", b), os.X_OK):
                raise Fail(f"{self.bin('platform', b)} is missing: build first")
        if self.ha and self.lab:
            raise Fail("--ha runs on this machine only (not with --netlab)", 64)
        if os.path.isdir(self.dir) and os.listdir(self.dir):
            if "hai-server" in Daemon.saved(self.dir) and Daemon.load(self.dir, "hai-server").running():
                raise Fail(f"already running in {self.dir} (down it first)")
            raise Fail(f"{self.dir} holds an earlier cluster's state: 'down --purge' it, or choose "
                       "another folder")
        cluster_toml = os.path.join(ROOT, c["CLUSTER_TOML"])
        nodes = node_names(cluster_toml, self.bin("scheduler", "hai-sim"))
        if not nodes:
            raise Fail(f"{cluster_toml} has no nodes", 78)
        head_at, head = self.place(nodes[0])
        os.makedirs(self.dir)
        if self.lab:
            with open(os.path.join(self.dir, "netlab"), "w") as f:
                f.write(f"{self.lab} {nodes[0]}\n")
        try:
            self._up(c, cluster_toml, nodes, head_at, head)
        except BaseException:
            say(f"start failed; stopping what started (logs kept in {self.dir})")
            self.down(purge=False)
            raise

    def _tls(self, nodes):
        """The cluster's TLS files (deploy/make-certs.sh): one authority and, the cluster being on
        one machine, one certificate for every node's address; every daemon started from here on
        gets them in its [tls] (daemons.TLS). The env files below hand them to the CLIs."""
        tls_dir = os.path.join(self.dir, "tls")
        addresses = ["127.0.0.1", "localhost"]
        for n in nodes:
            a = self.place(n)[1]
            if a not in addresses:
                addresses.append(a)
        r = subprocess.run(["bash", os.path.join(ROOT, "deploy", "make-certs.sh"), tls_dir,
                            "local=" + ",".join(addresses)], capture_output=True, text=True)
        if r.returncode != 0:
            raise Fail(f"deploy/make-certs.sh failed: {r.stderr.strip()}")
        daemons.TLS = {"ca_file": os.path.join(tls_dir, "ca.pem"),
                       "cert_file": os.path.join(tls_dir, "local.pem"),
                       "key_file": os.path.join(tls_dir, "local.key")}
        # And the CLIs this script runs (fs3 init, hai admin).
        os.environ.update(FF_TLS_CA_FILE=daemons.TLS["ca_file"],
                          FF_TLS_CERT_FILE=daemons.TLS["cert_file"],
                          FF_TLS_KEY_FILE=daemons.TLS["key_file"])
        say(f"TLS: every gRPC call over mutual TLS ({tls_dir}; TLS=0 runs plain)")

    def _up(self, c, cluster_toml, nodes, head_at, head):
        d = self.dir
        if c["TLS"] != "0":
            self._tls(nodes)
        fs3_env = {}
        checkpoints = os.path.join(d, "checkpoints")
        etcd = ""
        if self.ha:  # the control plane's shared store: three members
            etcd = start_etcd(etcd_members(d, 3, host=head))
            say(f"etcd: {etcd}")
        # ---- fs3 ----
        if (c["FS3"] != "0" and os.geteuid() == 0 and os.access("/dev/fuse", os.W_OK)
                and os.access(self.bin("fs3", "fs3-fuse"), os.X_OK)):
            env = dict(os.environ, FF_BUILD_DIR=self.build, FS3_HEAD_NODE=nodes[0],
                       FS3_STORAGE_NODES=" ".join(nodes[1:]), FS3_MOUNT=os.path.join(d, "fs3-mnt"),
                       FS3_REPLICATION=c["FS3_REPLICATION"],
                       FS3_STORAGE_SERVICES=c["FS3_STORAGE_SERVICES"])
            if self.lab:
                env["NETLAB"] = self.lab
            if self.ha:
                env.update(FS3_HA="1", FS3_ETCD=etcd)
            fs3_local.start(os.path.join(d, "fs3"), env)
            with open(os.path.join(d, "fs3", "env")) as f:
                for line in f:
                    k, v = line.removeprefix("export ").strip().split("=", 1)
                    fs3_env[k] = v
            checkpoints = os.path.join(fs3_env["FS3_MOUNT"], "checkpoints")
            os.makedirs(checkpoints, exist_ok=True)
        else:
            say("fs3 is left out (it needs root, /dev/fuse and a build with fs3-fuse; FS3=0 skips it)")

        # ---- hai-server, agents, hai-health ----
        pbin = os.path.join(self.build, "platform")
        token_file = os.path.join(d, "agent.token")
        servers = []
        for i, name in enumerate(["hai-server", "hai-server2"] if self.ha else ["hai-server"]):
            engine = {"engine": "etcd", "etcd_endpoints": etcd.split(","),
                      "election_ttl_s": 2} if self.ha else {}
            server = hai_server(pbin, d, cluster_toml, f"{head}:0", name=name, metrics=True,
                                data_dir=os.path.join(d, "server" if i == 0 else f"server{i + 1}"),
                                checkpoint_root=checkpoints, heartbeat_timeout_ms=5000,
                                heartbeat_interval_ms=250, schedule_interval_ms=250,
                                suspend_grace_ms=20000, **engine)
            server.config["metrics"] = {"listen": f"{head}:0"}
            servers.append(server.inside(head_at).start().rpc)
            if i == 0:
                # The first leads first: it makes the admin user (its token in server/admin.token).
                self._wait_file(os.path.join(d, "server", "admin.token"))
        server = ",".join(servers)
        python_path = ":".join([os.path.join(self.build, "python"), os.path.join(ROOT, "platform", "python")]
                               + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
        job_env = {"PATH": f"{ROOT}/.venv/bin:{os.environ.get('PATH', '/usr/bin:/bin')}",
                   "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
                   "PYTHONPATH": python_path, **fs3_env}
        for node in nodes:
            at, addr = self.place(node)
            agent = hai_agent(pbin, d, node, server, f"{addr}:0", name=f"agent-{node}",
                              token_file=token_file, state_dir=os.path.join(d, f"agent-{node}"),
                              gpus=int(c["GPUS_PER_NODE"]))
            agent.config["metrics"] = {"listen": f"{addr}:0"}
            agent.env = job_env
            agent.inside(at).start()
        for node in nodes:
            at, addr = self.place(node)
            hai_health(pbin, d, node, server, token_file, metrics_listen=f"{addr}:0",
                       interval_ms=int(c["HEALTH_INTERVAL_MS"]), gpus=int(c["HEALTH_EXPECT_GPUS"]),
                       fs3_mount=fs3_env.get("FS3_MOUNT", ""), disks=[d],
                       min_free_disk_mib=int(c["HEALTH_MIN_FREE_DISK_MIB"]),
                       validator_interval_s=int(c["HEALTH_VALIDATOR_INTERVAL_S"])).inside(at).start()
        with open(os.path.join(d, "server", "admin.token")) as f:
            admin = f.read().strip()
        hai = [*head_at, self.bin("platform", "hai")]
        r = subprocess.run([*hai, "admin", "user", "add", "researcher", "--json"], text=True,
                           capture_output=True, env=dict(os.environ, HAI_SERVER=server, HAI_TOKEN=admin))
        if r.returncode != 0:
            raise Fail(f"hai admin user add researcher: {r.stderr.strip()}")
        token = json.loads(r.stdout)["token"]

        # ---- hai-web: the read-only web view (log in with a user's token) ----
        web = hai_web(pbin, d, server, listen=f"{head}:0", fs3_mgmtd=fs3_env.get("FS3_MGMTD"),
                      name="hai-web")
        web.config["metrics"] = {"listen": f"{head}:0"}
        web = web.inside(head_at).start()
        web_url = web.ready["url"]

        # ---- Prometheus ----
        prom_url = ""
        if c["PROMETHEUS"] != "0":
            prom_url = self._prometheus(c, head_at, head)

        env_lines = [f"export HAI_SERVER={server}", f"export HAI_TOKEN={token}",
                     f"export HAI_WEB_URL={web_url}"]
        env_lines += [f"export {k}={v}" for k, v in fs3_env.items()]
        if daemons.TLS:
            # `hai` needs only the authority; `fs3` and fs3's native client (which fs3's services
            # ask for a certificate) the node's files too: on this one machine, every user has them.
            env_lines += [f"export FF_TLS_CA_FILE={daemons.TLS['ca_file']}",
                          f"export FF_TLS_CERT_FILE={daemons.TLS['cert_file']}",
                          f"export FF_TLS_KEY_FILE={daemons.TLS['key_file']}"]
        if prom_url:
            env_lines.append(f"export PROMETHEUS_URL={prom_url}")
        env_lines.append(f"export PATH={self.build}/platform:{self.build}/fs3:$PATH")
        if self.lab:
            # The CLIs reach the cluster from the first node's host.
            env_lines.append(f"export NETLAB={self.lab}")
            for tool in ("platform/hai", "fs3/fs3"):
                env_lines.append(f'{os.path.basename(tool)}() {{ {" ".join(head_at)} '
                                 f'"{self.build}/{tool}" "$@"; }}')
        for name, user_token in (("env", token), ("admin.env", admin)):
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.write("\n".join(line if not line.startswith("export HAI_TOKEN=")
                                  else f"export HAI_TOKEN={user_token}" for line in env_lines) + "\n")
            os.chmod(path, 0o600)
        say(f"up in {d}{f' (on the network lab {self.lab})' if self.lab else ''}:")
        say(f"  nodes:       {' '.join(nodes)} (each with hai-agent and hai-health)")
        say(f"  hai-server:  {server}; as the user 'researcher': source {d}/env (admin: {d}/admin.env)")
        if self.ha:
            say(f"  etcd:        {etcd} (fs3-mgmtd, fs3-meta and hai-server each twice, one leading)")
        say(f"  web view:    {web_url} (log in with $HAI_TOKEN from {d}/env)")
        if fs3_env:
            say(f"  fs3:         mounted at {fs3_env['FS3_MOUNT']} ({c['FS3_STORAGE_SERVICES']} storage "
                f"services, chains of {c['FS3_REPLICATION']}); meta {fs3_env['FS3_META']}, "
                f"mgmtd {fs3_env['FS3_MGMTD']}")
        say(f"  checkpoints: {checkpoints}")
        if prom_url:
            say(f"  Prometheus:  {prom_url} (targets: {prom_url}/targets, alerts: {prom_url}/alerts)")

    @staticmethod
    def _wait_file(path, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(path) and os.path.getsize(path) > 0:
                return
            time.sleep(0.1)
        raise Fail(f"{path} did not appear in {timeout} s (the first hai-server did not lead)")

    def _prometheus(self, c, head_at, head):
        d = self.dir
        if not shutil.which("prometheus"):
            raise Fail("prometheus is not installed (deploy/install-deps.sh)")
        saved = Daemon.saved(d)
        jobs = [("hai-server", [n for n in saved if n.startswith("hai-server")]), ("hai-web", ["hai-web"]),
                ("hai-agent", [n for n in saved if n.startswith("agent-")]),
                ("hai-health", [n for n in saved if n.startswith("health-")])]
        if any(n.startswith("etcd") for n in saved):  # etcd serves /metrics on its client port
            jobs.append(("etcd", [n for n in saved if n.startswith("etcd")]))
        fs3 = os.path.join(d, "fs3")
        if os.path.isdir(fs3):
            in_fs3 = Daemon.saved(fs3)
            jobs += [("fs3-mgmtd", [f"fs3/{n}" for n in in_fs3 if n.startswith("mgmtd")]),
                     ("fs3-meta", [f"fs3/{n}" for n in in_fs3 if n.startswith("meta")]),
                     ("fs3-storage", [f"fs3/{n}" for n in in_fs3 if n.startswith("storage")]),
                     ("fs3-fuse", ["fs3/fuse"])]
        lines = [f"global:\n  scrape_interval: {c['SCRAPE_INTERVAL']}\n  evaluation_interval: {c['SCRAPE_INTERVAL']}",
                 f'rule_files: ["{ROOT}/deploy/prometheus/alerts.yml"]', "scrape_configs:"]
        targets = 0
        for job, names in jobs:
            lines.append(f"  - job_name: {job}\n    static_configs:")
            for name in names:
                with open(os.path.join(d, f"{name}.ready")) as f:
                    ready = json.load(f)
                metrics = ready.get("metrics") or ready["rpc"]
                lines.append(f'      - targets: ["{metrics}"]\n        labels: {{service: "{os.path.basename(name)}"}}')
                targets += 1
        with open(os.path.join(d, "prometheus.yml"), "w") as f:
            f.write("\n".join(lines) + "\n")
        with socket_on(head_at) as port:
            url = f"http://{head}:{port}"
        with open(os.path.join(d, "prometheus.url"), "w") as f:
            f.write(url + "\n")
        with open(os.path.join(d, "prometheus.log"), "w") as log:
            p = subprocess.Popen([*head_at, "prometheus", f"--config.file={d}/prometheus.yml",
                                  f"--storage.tsdb.path={d}/prometheus",
                                  f"--web.listen-address={head}:{port}"],
                                 stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
        with open(os.path.join(d, "prometheus.pid"), "w") as f:
            f.write(f"{p.pid}\n")
        up = 0
        for _ in range(300):
            try:
                up = prom_query(head_at, url, "/api/v1/targets").count('"health":"up"')
            except (OSError, subprocess.SubprocessError, ValueError):
                up = 0
            if up >= targets:
                return url
            time.sleep(0.1)
        with open(os.path.join(d, "prometheus.log")) as f:
            raise Fail(f"Prometheus sees {up} of {targets} targets up; its log:\n{f.read()[-2000:]}")

    # ---- down --------------------------------------------------------------------------------
    def down(self, purge):
        d = self.dir
        if not os.path.isdir(d):
            say(f"nothing in {d}")
            return
        daemons = [Daemon.load(d, n) for n in Daemon.saved(d)]
        stop_all(daemons, timeout=5)
        kill_pidfile(os.path.join(d, "prometheus.pid"))
        # Jobs run in their own process groups (they outlive agents on purpose): end them too.
        for name in os.listdir(d):
            tasks = os.path.join(d, name, "tasks.json")
            if name.startswith("agent-") and os.path.exists(tasks):
                for pid in re.findall(r'"pid":(\d+)', open(tasks).read()):
                    try:
                        os.killpg(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
        if os.path.isdir(os.path.join(d, "fs3")):
            fs3_local.stop(os.path.join(d, "fs3"), keep=True)
        # A mount left by a crash (fs3-fuse killed) still answers ENOTCONN until unmounted.
        fs3_local.unmount(os.path.join(d, "fs3-mnt"))
        for name in os.listdir(d):
            if name.endswith((".ready", ".pid")):
                os.remove(os.path.join(d, name))
        if purge:
            shutil.rmtree(d, ignore_errors=True)
            say(f"stopped; removed {d}")
        else:
            say(f"stopped; logs and data kept in {d} (down --purge removes them)")

    # ---- status ------------------------------------------------------------------------------
    def status(self):
        d = self.dir
        if not os.path.isdir(d):
            raise Fail(f"nothing in {d}")
        head_at = []
        if os.path.exists(os.path.join(d, "netlab")):
            lab, head = open(os.path.join(d, "netlab")).read().split()
            head_at = netlab_prefix(lab, head)
        bad = 0
        print(f"{'SERVICE':<24} {'STATE':<8} ENDPOINTS")
        for sub in ("", "fs3"):
            for name in Daemon.saved(os.path.join(d, sub)):
                daemon = Daemon.load(os.path.join(d, sub), name)
                running = daemon.running()
                bad |= not running
                ready = json.dumps(daemon.ready, separators=(",", ":")) if running and daemon.ready else ""
                print(f"{name:<24} {'running' if running else 'DEAD':<8} {ready}")
        url_file = os.path.join(d, "prometheus.url")
        if os.path.exists(url_file) and os.path.exists(os.path.join(d, "prometheus.pid")):
            url = open(url_file).read().strip()
            print(f"== Prometheus {url}: scrape targets and alerts ==")
            for t in json.loads(prom_query(head_at, url, "/api/v1/targets"))["data"]["activeTargets"]:
                lb = t["labels"]
                print("  %-12s %-22s %-5s %s" % (lb["job"], lb.get("service", ""), t["health"], t["lastError"]))
            alerts = json.loads(prom_query(head_at, url, "/api/v1/alerts"))["data"]["alerts"]
            print("  alerts: " + (", ".join(f"{a['labels']['alertname']} ({a['state']})" for a in alerts)
                                  or "none"))
        admin_env = os.path.join(d, "admin.env")
        if os.path.exists(admin_env):
            print("== hai nodes ==", flush=True)
            env = dict(os.environ)
            for line in open(admin_env):
                if line.startswith("export HAI_"):
                    k, v = line.removeprefix("export ").strip().split("=", 1)
                    env[k] = v
            subprocess.run([*head_at, self.bin("platform", "hai"), "nodes"], env=env)
        return bad


class socket_on:
    """A free TCP port where `prefix` runs (the lab's host, or here)."""

    def __init__(self, prefix):
        self.prefix = prefix

    def __enter__(self):
        out = subprocess.run([*self.prefix, sys.executable, "-c",
                              "import socket; s = socket.socket(); s.bind(('0.0.0.0', 0)); "
                              "print(s.getsockname()[1])"], capture_output=True, text=True, check=True)
        return int(out.stdout.strip())

    def __exit__(self, *exc):
        return False


def prom_query(prefix, url, path):
    """GET url+path from where `prefix` runs (the lab's hosts have no route to this machine)."""
    if not prefix:
        return urllib.request.urlopen(url + path, timeout=5).read().decode()
    return subprocess.run([*prefix, sys.executable, "-c",
                           "import sys, urllib.request; "
                           "print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())",
                           url + path], capture_output=True, text=True, check=True, timeout=30).stdout


def kill_pidfile(path):
    try:
        pid = int(open(path).read().strip())
    except (OSError, ValueError):
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def main(argv=None):
    argv = sys.argv if argv is None else argv
    cmd = argv[1] if len(argv) > 1 else ""
    directory, config, purge = "/tmp/fireflyer-local", "deploy/config/local-cluster.toml", False
    lab = os.environ.get("NETLAB", "")
    ha = False
    rest = argv[2:]
    while rest:
        a = rest.pop(0)
        if a == "--config" and rest:
            config = rest.pop(0)
        elif a == "--purge":
            purge = True
        elif a == "--netlab" and rest:
            lab = rest.pop(0)
        elif a == "--ha":
            ha = True
        elif a.startswith("-"):
            say(f"unknown option {a}")
            return 64
        else:
            directory = a
    cluster = LocalCluster(directory, os.path.join(ROOT, config) if not os.path.isabs(config) else config, lab, ha)
    try:
        if cmd in ("up", "start"):
            cluster.up()
        elif cmd in ("down", "stop"):
            cluster.down(purge or cmd == "stop")
        elif cmd == "status":
            return cluster.status()
        else:
            print("usage: deploy/local-cluster.sh up|status|down [DIR] [--config FILE] [--purge] [--ha]",
                  file=sys.stderr)
            return 64
    except (Fail, RuntimeError) as e:
        say(str(e))
        return getattr(e, "code", 1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
