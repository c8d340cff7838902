"""The README's demo as a test: deploy/local-cluster.sh brings up the whole stack (fs3 with chains
of three and its mount, hai-server, four nodes with hai-agent and hai-health, Prometheus); a token
dataset goes into fs3; a 2-node x 2-rank GPT job over HFReduce reads it through fs3client,
checkpoints to the mount, is preempted by a higher-priority job, resumes and succeeds with its loss
down. Meanwhile a storage service is killed -9: the job does not notice, Prometheus fires
StorageTargetOffline, and after a restart the target resyncs and the alert clears.

Needs root (FUSE mount) like the README's commands; the build from $FF_BUILD_DIR."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from ffdeploy.daemons import Daemon

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sh(*args, env=None, check=True, timeout=120):
    r = subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=timeout,
                       cwd=ROOT)
    if check and r.returncode != 0:
        raise AssertionError(f"{shlex.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


def wait_for(what, done, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = done()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    assert os.geteuid() == 0, "the local cluster mounts fs3 with FUSE: run as root (CI does)"
    d = str(tmp_path_factory.mktemp("cluster") / "c")
    env = dict(os.environ, FF_BUILD_DIR=os.environ["FF_BUILD_DIR"])
    try:
        sh("bash", "deploy/local-cluster.sh", "up", d, env=env, timeout=300)
        values = {}
        for line in open(os.path.join(d, "env")):
            if line.startswith("export ") and "=" in line:
                k, v = line[len("export "):].strip().split("=", 1)
                values[k] = v
        env.update({k: v for k, v in values.items() if k != "PATH"})
        # The cluster runs TLS (local-cluster.toml): fs3client in this process too needs the files.
        os.environ.update({k: v for k, v in values.items() if k.startswith("FF_TLS_")})
        yield d, env
    finally:
        sh("bash", "deploy/local-cluster.sh", "down", d, "--purge", env=env, check=False)


def prom(env, path, **params):
    url = env["PROMETHEUS_URL"] + path + ("?" + urllib.parse.urlencode(params) if params else "")
    return json.load(urllib.request.urlopen(url, timeout=5))["data"]


def firing(env, name):
    return [a for a in prom(env, "/api/v1/alerts")["alerts"]
            if a["labels"]["alertname"] == name and a["state"] == "firing"]


def test_demo_training_job_preempted_resumed_through_a_storage_crash(cluster):
    d, env = cluster
    build = os.environ["FF_BUILD_DIR"]
    hai = os.path.join(build, "platform", "hai")

    def show(job):
        return json.loads(sh(hai, "show", str(job), "--json", env=env).stdout)

    # Every daemon is a Prometheus target, and up.
    targets = prom(env, "/api/v1/targets")["activeTargets"]
    jobs = {t["labels"]["job"] for t in targets}
    assert jobs == {"hai-server", "hai-web", "hai-agent", "hai-health", "fs3-mgmtd", "fs3-meta",
                    "fs3-storage", "fs3-fuse"}
    assert len(targets) == 16 and all(t["health"] == "up" for t in targets), targets
    nodes = json.loads(sh(hai, "nodes", "--json", env=env).stdout)["nodes"]
    assert all(n["state"] == "NODE_UP" and not n["drained"] for n in nodes)
    wait_for("every node's first health report",
             lambda: all(n["health_report_ms"] != "0" for n in
                         json.loads(sh(hai, "nodes", "--json", env=env).stdout)["nodes"]), 30)

    # Every gRPC server runs TLS (local-cluster.toml's tls = true; common/tls.h), and fs3-meta keeps
    # its plain frame transport off.
    for log in ("hai-server.log", "fs3/mgmtd.log", "fs3/meta.log", "agent-A-leaf-n00.log"):
        assert "(TLS)" in open(os.path.join(d, log)).read(), log
    assert "no frame transport: the cluster runs TLS" in open(os.path.join(d, "fs3/meta.log")).read()

    # The dataset, written through fs3client.
    code = ("import numpy as np, fs3client\n"
            "from fs3client.data import write_tokens\n"
            "text = b''.join(open(p, 'rb').read() for p in ['README.md', 'fs3/README.md',"
            " 'platform/README.md', 'haiscale/README.md', 'hfreduce/README.md'])\n"
            "write_tokens(fs3client.FileSystem.from_env(), '/corpus.u16',"
            " np.frombuffer(text, np.uint8))\n")
    sh(sys.executable, "-c", code, env=env)

    train = (f"{sys.executable} {ROOT}/haiscale/examples/train_gpt.py --fs3-data /corpus.u16 "
             f"--vocab 256 --seq-len 64 --batch 16 --steps 300 --save-every 20 --log-every 10 "
             f"--loss-csv {d}/loss.csv")
    sh(hai, "submit", "--name", "gpt", "--nodes", "2", "--gpus-per-node", "2",
       "--procs-per-node", "2", "--priority", "1", "--", train, env=env)
    wait_for("job 1 running", lambda: show(1)["state"] == "RUNNING", 60)
    logs = lambda: sh(hai, "logs", "1", "--rank", "0", env=env).stdout
    wait_for("step 10 of job 1", lambda: "step    10" in logs(), 180)

    # kill -9 one storage service while the job reads and checkpoints.
    pid = int(open(os.path.join(d, "fs3", "storage2.pid")).read())
    os.kill(pid, signal.SIGKILL)
    wait_for("StorageTargetOffline firing", lambda: firing(env, "StorageTargetOffline"), 90)

    # Preemption: a 4-node job at higher priority; the training job checkpoints and waits.
    sh(hai, "submit", "--name", "urgent", "--nodes", "4", "--gpus-per-node", "2", "--priority",
       "5", "--may-span-zones", "--", f"{build}/platform/hai-demo-train 60 0.05", env=env)
    try:
        wait_for("job 1 suspended", lambda: show(1)["runs"][0]["end_reason"] == "suspended", 120)
    except AssertionError as e:
        server_log = open(os.path.join(d, "hai-server.log")).read()[-3000:]
        raise AssertionError(f"{show(1)}\n{show(2)}\n{logs()}\n{server_log}") from e
    wait_for("job 2 done", lambda: show(2)["state"] == "SUCCEEDED", 120)

    # The storage service comes back: its target resyncs and the alert clears.
    Daemon.load(os.path.join(d, "fs3"), "storage2").start(timeout=60)

    job = wait_for("job 1 finished", lambda: (j := show(1))["state"] in ("SUCCEEDED", "FAILED")
                   and j, 600)
    assert job["state"] == "SUCCEEDED", logs()
    runs = job["runs"]
    assert len(runs) == 2 and runs[0]["end_reason"] == "suspended", runs
    out = logs()
    assert "starting at step 0" in out and "suspending" in out
    resumed_at = int(out.split("starting at step ")[2].split(";")[0].split()[0])
    assert resumed_at >= 10
    rows = [line.split(",") for line in open(f"{d}/loss.csv").read().split()[1:]]
    losses = [float(v) for _, v in rows]
    assert int(rows[-1][0]) == 300 and losses[-1] < losses[0] * 0.75, rows
    # What rank 0 reported (hai_job.report), across both runs: `hai metrics` agrees with the CSV.
    reported = json.loads(sh(f"{build}/platform/hai", "metrics", "1", "--json", env=env).stdout)
    records = reported["records"]
    assert {r["run"] for r in records} == {0, 1} and records[-1]["step"] == "300", records[-3:]
    assert abs(records[-1]["values"]["loss"] - losses[-1]) < 1e-3, (records[-1], losses[-1])
    ckpt = os.path.join(env["FS3_MOUNT"], "checkpoints", "researcher", "1")
    assert any(name.startswith("step-") for name in os.listdir(ckpt)), os.listdir(ckpt)

    wait_for("every target serving again",
             lambda: prom(env, "/api/v1/query", query='fs3_mgmtd_targets{state="serving"}')
             ["result"][0]["value"][1] == "3", 120)
    wait_for("StorageTargetOffline cleared", lambda: not firing(env, "StorageTargetOffline"), 60)
    sh(f"{build}/fs3/fs3", "fsck", "--meta", env["FS3_META"], env=env)  # exits non-zero on damage
    wait_for("every Prometheus target up", lambda: all(
        t["health"] == "up" for t in prom(env, "/api/v1/targets")["activeTargets"]), 30)

    # The web view the demo points at: logged in with the researcher's token, the job's page has
    # its runs (the preempted one and the resumed one) and the plots of what it reported.
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    page = opener.open(env["HAI_WEB_URL"] + "login",
                       data=urllib.parse.urlencode({"token": env["HAI_TOKEN"]}).encode(),
                       timeout=10).read().decode()
    assert "Your jobs" in page and 'data-job="1"' in page, page[-2000:]
    page = opener.open(env["HAI_WEB_URL"] + "jobs/1", timeout=30).read().decode()
    assert page.count("<tr><td>") >= 2 and "suspended" in page, page[-3000:]
    assert 'id="metric-loss"' in page and "<polyline" in page, "no loss plot on the job's page"
    assert 'id="metric-tokens_per_s"' in page, "no throughput plot on the job's page"
