"""The README's demo job on the highly available local cluster (deploy/local-cluster.sh up --ha:
three etcd members, two fs3-mgmtd, two fs3-meta, two hai-servers): while the GPT job trains
(HaiScale over HFReduce, reading its dataset from fs3 and checkpointing to the mount), the
fs3-mgmtd leader, the hai-server leader and an fs3-meta server are killed -9, one after another.
The job does not notice: it finishes in its first run, its loss down, every checkpoint readable;
the standbys lead; fsck finds fs3 clean; Prometheus scrapes etcd and sees a leader of each.

Needs root (FUSE mount); the build from $FF_BUILD_DIR."""

import json
import os
import signal
import sys

import pytest
from test_local_cluster_e2e import ROOT, prom, sh, wait_for


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    assert os.geteuid() == 0, "the local cluster mounts fs3 with FUSE: run as root (CI does)"
    d = str(tmp_path_factory.mktemp("cluster") / "c")
    env = dict(os.environ, FF_BUILD_DIR=os.environ["FF_BUILD_DIR"])
    try:
        sh("bash", "deploy/local-cluster.sh", "up", d, "--ha", env=env, timeout=300)
        for line in open(os.path.join(d, "env")):
            if line.startswith("export ") and "=" in line:
                k, v = line[len("export "):].strip().split("=", 1)
                if k != "PATH":
                    env[k] = v
        yield d, env
    finally:
        sh("bash", "deploy/local-cluster.sh", "down", d, "--purge", env=env, check=False)


def kill(pidfile):
    os.kill(int(open(pidfile).read()), signal.SIGKILL)


def test_the_demo_job_trains_through_killed_leaders(cluster):
    d, env = cluster
    build = os.environ["FF_BUILD_DIR"]
    hai = os.path.join(build, "platform", "hai")
    fs3 = os.path.join(build, "fs3", "fs3")
    assert len(env["HAI_SERVER"].split(",")) == 2 and len(env["FS3_META"].split(",")) == 2
    assert len(env["FS3_MGMTD"].split(",")) == 2

    def show(job):
        return json.loads(sh(hai, "show", str(job), "--json", env=env).stdout)

    def leads_mgmtd(name):
        ready = json.load(open(os.path.join(d, "fs3", f"{name}.ready")))
        return sh(fs3, "--mgmtd", ready["rpc"], "nodes", "--json", env=env, check=False).returncode == 0

    def leads_hai(name):
        ready = json.load(open(os.path.join(d, f"{name}.ready")))
        return sh(hai, "whoami", env=dict(env, HAI_SERVER=ready["rpc"]), check=False).returncode == 0

    code = ("import numpy as np, fs3client\n"
            "from fs3client.data import write_tokens\n"
            "text = b''.join(open(p, 'rb').read() for p in ['README.md', 'fs3/README.md',"
            " 'platform/README.md'])\n"
            "write_tokens(fs3client.FileSystem.from_env(), '/corpus.u16',"
            " np.frombuffer(text, np.uint8))\n")
    sh(sys.executable, "-c", code, env=env)
    train = (f"{sys.executable} {ROOT}/haiscale/examples/train_gpt.py --fs3-data /corpus.u16 "
             f"--vocab 256 --seq-len 64 --batch 16 --steps 200 --save-every 20 --log-every 10 "
             f"--loss-csv {d}/loss.csv")
    sh(hai, "submit", "--name", "gpt", "--nodes", "2", "--gpus-per-node", "2",
       "--procs-per-node", "2", "--", train, env=env)
    logs = lambda: sh(hai, "logs", "1", "--rank", "0", env=env).stdout
    wait_for("step 10 of job 1", lambda: "step    10" in logs(), 240)

    # The fs3-mgmtd leader dies; the other replica leads.
    leader = next(n for n in ("mgmtd", "mgmtd2") if leads_mgmtd(n))
    other = "mgmtd2" if leader == "mgmtd" else "mgmtd"
    kill(os.path.join(d, "fs3", f"{leader}.pid"))
    wait_for(f"{other} to lead", lambda: leads_mgmtd(other), 20)
    wait_for("step 40 of job 1", lambda: "step    40" in logs(), 240)

    # The hai-server leader dies; the standby leads and the job keeps its run.
    leader = next(n for n in ("hai-server", "hai-server2") if leads_hai(n))
    other = "hai-server2" if leader == "hai-server" else "hai-server"
    kill(os.path.join(d, f"{leader}.pid"))
    wait_for(f"{other} to lead", lambda: leads_hai(other), 20)
    wait_for("step 70 of job 1", lambda: "step    70" in logs(), 240)

    # An fs3-meta server dies while the job checkpoints to the mount.
    kill(os.path.join(d, "fs3", "meta.pid"))

    job = wait_for("job 1 finished", lambda: (j := show(1))["state"] in ("SUCCEEDED", "FAILED")
                   and j, 900)
    assert job["state"] == "SUCCEEDED", logs()
    assert len(job["runs"]) == 1, f"the job was restarted: {job['runs']}"
    rows = [line.split(",") for line in open(f"{d}/loss.csv").read().split()[1:]]
    losses = [float(v) for _, v in rows]
    assert int(rows[-1][0]) == 200 and losses[-1] < losses[0] * 0.8, rows
    ckpt = os.path.join(env["FS3_MOUNT"], "checkpoints", "researcher", "1")
    steps = [n for n in os.listdir(ckpt) if n.startswith("step-")]
    assert steps, os.listdir(ckpt)
    sh(fs3, "fsck", "--meta", env["FS3_META"], env=env)  # exits non-zero on damage

    # Prometheus scrapes etcd, and sees one leader of each after the kills.
    jobs = {t["labels"]["job"] for t in prom(env, "/api/v1/targets")["activeTargets"]}
    assert "etcd" in jobs, jobs
    wait_for("a fs3-mgmtd leader in Prometheus", lambda: prom(
        env, "/api/v1/query", query="sum(fs3_mgmtd_leader)")["result"][0]["value"][1] == "1", 60)
    wait_for("a hai-server leader in Prometheus", lambda: prom(
        env, "/api/v1/query", query="sum(hai_server_leader)")["result"][0]["value"][1] == "1", 60)
