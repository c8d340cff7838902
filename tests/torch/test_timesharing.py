"""Checkpoint-aware time-sharing on a real platform (hai-server, agents, jobs as processes): the
victim of a preemption is the job that loses least, a suspended job is given a deadline from its
checkpoints' write time, and one that misses it is killed with what it lost in its history."""

import json
import os
import sys
import tempfile
import time

from hai_cluster import HaiCluster, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))


def _submit(cluster, out, name, period_s, write_s, save_s, haiscale=False, priority=3, slots=False):
    args = json.dumps([out, name, period_s, write_s, save_s, haiscale, slots])
    command = f"{sys.executable} {os.path.join(HERE, 'rank_runner.py')} timesharing_worker:train '{args}'"
    return cluster.submit("--nodes", "1", "--gpus-per-node", "2", "--priority", str(priority),
                          "--name", name, "--env", "OMP_NUM_THREADS=1", "--", command)


def _run_events(cluster, job, run=0):
    return [e["text"] for e in cluster.show(job)["runs"][run].get("events", [])]


def _first_run_ended(cluster, job):
    """The job, once its first run has ended; else None."""
    shown = cluster.show(job)
    return shown if shown["runs"][0]["end_ms"] != "0" else None


def test_the_job_that_checkpointed_just_now_is_suspended_not_the_one_that_has_not():
    """Two same-priority jobs fill the two nodes: `saver` (haiscale.checkpoint every 0.5 s, so it
    saves in well under its deadline) started first, `idle` (never reports a checkpoint) after it.
    A priority-5 job needs one node: suspending `saver` costs its 2 GPUs a save and a restart
    (restart_cost_s = 1), suspending `idle` the 2 GPUs' work since it started, so `saver` goes,
    although it is the older one (newest-first would take `idle`). Its history says why."""
    options = dict(restart_cost_s=1, suspend_grace_ms=5000)
    with tempfile.TemporaryDirectory() as tmp, HaiCluster(tmp, nodes=2, server_options=options) as cluster:
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        saver = _submit(cluster, out, "saver", 0.5, 0, 0, haiscale=True)
        cluster.wait_state(saver, "RUNNING")
        wait_for("the saver's first checkpoint report",
                 lambda: cluster.show(saver)["runs"][0].get("checkpoint", {}).get("ranks"))
        idle = _submit(cluster, out, "idle", 0, 0, 0)
        cluster.wait_state(idle, "RUNNING")
        time.sleep(5)  # idle's work since its start grows; saver keeps saving
        urgent = _submit(cluster, out, "urgent", 0, 0, 0, priority=5)
        cluster.wait_state(urgent, "RUNNING")
        assert cluster.show(idle)["state"] == "RUNNING"
        suspended = cluster.wait_state(saver, "SUSPENDED")
        events = "\n".join(_run_events(cluster, saver))
        assert f"suspended for job {urgent} (priority 5): lost ~" in events, events
        assert f"rather than job {idle} (~" in events, events
        assert "since it started (it reports no checkpoints))" in events, events
        assert "suspended: saved step" in events, events  # it saved on suspension, in time
        assert suspended["runs"][0]["checkpoint"]["ranks"] == 1, suspended
        open(os.path.join(out, "stop"), "w").close()
        for job in (urgent, idle, saver):
            cluster.wait_state(job, "SUCCEEDED", timeout=120)


def test_a_slow_checkpoint_gets_a_longer_deadline_and_a_job_that_misses_its_deadline_is_killed():
    """suspend_grace_ms = 2 s is the deadline of a job that never reported a checkpoint (the fixed
    grace of old). `slow` reports checkpoints that take 3 s: asked to suspend, it is given
    1.5 x 3 + 1 = 5.5 s (hai_job.suspend_deadline says so), saves in 3 s and is suspended with
    what it saved: the fixed 2 s would have killed it. `late` reports 1 s checkpoints (given
    2.5 s) but takes 10 s to save when asked: it is killed at its deadline, and its history says
    what it lost since its last checkpoint."""
    options = dict(suspend_grace_ms=2000, suspend_grace_margin=1.5, suspend_grace_slack_ms=1000)
    with tempfile.TemporaryDirectory() as tmp, HaiCluster(tmp, nodes=2, server_options=options) as cluster:
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        slow = _submit(cluster, out, "slow", 60, 3, 3)
        late = _submit(cluster, out, "late", 60, 1, 10)
        for job in (slow, late):
            cluster.wait_state(job, "RUNNING")
            wait_for(f"job {job}'s checkpoint report",
                     lambda job=job: cluster.show(job)["runs"][0].get("checkpoint", {}).get("ranks"))
        for job in (slow, late):
            cluster.hai("suspend", str(job))
        shown = cluster.hai("show", str(slow))
        assert "to save and exit within 5.5s" in shown, shown
        # Each run 0 ends suspended (the job resumes at once: nothing else wants the node).
        ended = {job: wait_for(f"the end of job {job}'s first run",
                               lambda job=job: _first_run_ended(cluster, job), timeout=30)
                 for job in (slow, late)}

        run = ended[slow]["runs"][0]
        assert run["end_reason"] == "suspended", run
        assert run["suspend_grace_ms"] == "5500", run
        assert all(code == 0 for code in run["exit_codes"].values()), run
        events = "\n".join(e["text"] for e in run["events"])
        assert "given 5.5s to save and exit (its checkpoints take 3.0s)" in events, events
        assert "suspended: saved step" in events and "in 3.0s, within its 5.5s deadline" in events, events
        asked = json.load(open(os.path.join(out, "slow.suspend.json")))
        assert 5.0 <= asked["deadline"] - asked["asked"] <= 5.6, asked  # what hai_job told the job

        run = ended[late]["runs"][0]
        assert run["end_reason"] == "suspended", run
        assert run["suspend_grace_ms"] == "2500", run
        assert 137 in run["exit_codes"].values(), run  # killed at the deadline
        events = "\n".join(e["text"] for e in run["events"])
        assert "suspended: missed its 2.5s suspend deadline: killed; lost ~" in events, events
        assert "GPU-s since its checkpoint of step 0 at " in events, events
        open(os.path.join(out, "stop"), "w").close()
        for job in (slow, late):
            cluster.wait_state(job, "SUCCEEDED", timeout=120)


def test_staggered_checkpoints_of_jobs_on_the_same_period_do_not_overlap():
    """Three jobs checkpoint every 3 s, each write taking 1 s at 0.1 GB/s (hai_job.checkpoint_slot
    before it). With checkpoint_write_gbps = 0.1 the platform lets one through at a time: no two
    writes overlap, and each waits less than the others' writes take (about 2 s). The first writes
    are let through one at a time too (a job's rate is unknown until it reports one)."""
    options = dict(checkpoint_write_gbps=0.1, checkpoint_max_delay_ms=20000)
    with tempfile.TemporaryDirectory() as tmp, HaiCluster(tmp, nodes=3, server_options=options) as cluster:
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        jobs = [_submit(cluster, out, f"j{i}", 3, 1, 0, slots=True) for i in range(3)]
        for job in jobs:
            cluster.wait_state(job, "RUNNING")

        def windows():
            got = []
            for i in range(3):
                path = os.path.join(out, f"j{i}.ckpts")
                if os.path.exists(path):
                    got += [dict(json.loads(line), job=i) for line in open(path)]
            return got

        wait_for("9 checkpoints", lambda: len(windows()) >= 9, timeout=90)
        open(os.path.join(out, "stop"), "w").close()
        for job in jobs:
            cluster.wait_state(job, "SUCCEEDED", timeout=60)
        seen = sorted(windows(), key=lambda w: w["began"])
        for a, b in zip(seen, seen[1:]):
            assert b["began"] >= a["ended"] - 0.05, (a, b)  # one at a time
        assert max(w["waited"] for w in seen) < 5, seen
