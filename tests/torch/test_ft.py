"""Fault-tolerant data parallelism (haiscale.ft) with real processes: replica groups that train
through a quorum served by hfreduce-store; a group killed -9 and replaced, a group hung by
SIGSTOP, and fewer groups than min_replicas. Every group must end bit-identical, the survivors
must go on within seconds, the data stream must be used exactly once, and the loss must follow
an uninterrupted run's."""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from launch import HERE, free_port

from ffdeploy.daemons import hfreduce_store

STEPS = 150  # long enough that the others still train when a replacement arrives
BUILD = os.environ.get("FF_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))


@pytest.fixture
def store():
    with tempfile.TemporaryDirectory() as tmp:
        daemon = hfreduce_store(os.path.join(BUILD, "hfreduce"), tmp).start()
        try:
            yield daemon.rpc
        finally:
            daemon.kill()


class Group:
    """One replica group: a process running ft_worker.train."""

    def __init__(self, store, replica_id, out_dir, steps=STEPS, **kwargs):
        env = dict(os.environ, HFREDUCE_NODE_ID=f"group{replica_id}", PYTHONUNBUFFERED="1",
                   OMP_NUM_THREADS="1")
        args = json.dumps([store, str(replica_id), steps, out_dir, kwargs])
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "rank_runner.py"),
                                      "ft_worker:train", args], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def wait(self, timeout=180):
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, _ = self.proc.communicate()
            out += "\n[killed at the test's timeout]"
        return self.proc.returncode, out


def wait_for_step(out_dir, replica_id, step, timeout=120):
    deadline = time.monotonic() + timeout
    path = os.path.join(out_dir, f"step.{replica_id}")
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                if int(f.read() or 0) >= step:
                    return time.time()
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"group {replica_id} never reached step {step}")


def results(out_dir):
    out = {}
    for path in glob.glob(os.path.join(out_dir, "result.*.json")):
        with open(path) as f:
            r = json.load(f)
        out[r["replica"]] = r
    return out


def check_stream(result, batch=16):
    """Each committed step took the next world x batch samples: none dropped, none doubled."""
    log = result["log"]
    for a, b in zip(log, log[1:]):
        if b["step"] == a["step"] + 1:
            assert b["samples_before"] == a["samples_before"] + a["world"] * batch, (a, b)
    assert result["samples"] == log[-1]["samples_before"] + log[-1]["world"] * batch


def uninterrupted(store):
    with tempfile.TemporaryDirectory() as out:
        groups = [Group(store, i, out) for i in range(3)]
        for g in groups:
            code, output = g.wait()
            assert code == 0, output
        return results(out)


def test_a_killed_group_is_replaced_and_every_group_ends_identical(store):
    baseline = uninterrupted(store)
    assert len({r["digest"] for r in baseline.values()}) == 1
    with tempfile.TemporaryDirectory() as out:
        groups = [Group(store, i, out) for i in range(3)]
        # The platform's replacement, in the lost one's place. Started now and held until the
        # survivors have gone on without group 1: started after the kill it still had to import
        # torch, and on a loaded machine the survivors could finish their steps before it asked,
        # leaving it alone to wait for a quorum that could not form (a full run here failed with
        # "1 of at least 2 replica groups ... asked in time").
        go = os.path.join(out, "go.1")
        replacement = Group(store, 1, out, start_after=go)
        wait_for_step(out, 1, 15)
        killed_at = time.time()
        os.killpg(groups[1].proc.pid, signal.SIGKILL)
        with open(os.path.join(out, "step.0")) as f:
            wait_for_step(out, 0, int(f.read()) + 2)  # two steps of two groups
        open(go, "w").close()
        outputs = [groups[0].wait(), groups[2].wait(), replacement.wait()]
        for code, output in outputs:
            assert code == 0, output
        done = results(out)
    assert set(done) == {"0", "1", "2"}
    assert len({r["digest"] for r in done.values()}) == 1, "groups differ after the join"
    assert all(r["step"] == STEPS for r in done.values())
    assert done["1"]["healed_at"], "the replacement did not take a live group's state"
    survivor = done["0"]
    worlds = [e["world"] for e in survivor["log"]]
    assert 2 in worlds and worlds[-1] == 3, worlds
    recovered_at = next(e["at"] for e in survivor["log"] if e["at"] > killed_at and e["world"] == 2)
    rejoined_at = next(e["at"] for e in survivor["log"]
                       if e["at"] > recovered_at and e["world"] == 3)
    print(f"ft: recovery {recovered_at - killed_at:.2f}s, rejoin {rejoined_at - killed_at:.2f}s")
    assert recovered_at - killed_at < 10
    for r in done.values():
        check_stream(r)
    # The loss follows the uninterrupted run's: the mean of the last 10 steps within 25% (the
    # steps with two groups average fewer samples, and the data order shifts).
    tail = lambda r: sum(e["loss"] for e in r["log"][-10:]) / 10  # noqa: E731
    assert tail(survivor) < 1.25 * tail(baseline["0"]) + 0.01, (tail(survivor), tail(baseline["0"]))


def test_a_hung_group_is_left_out_then_heals_and_ends_identical(store):
    # Enough steps that the others are still training when the frozen group thaws (a group
    # still behind when the others have finished has no one left to heal from).
    with tempfile.TemporaryDirectory() as out:
        groups = [Group(store, i, out, steps=400) for i in range(3)]
        wait_for_step(out, 2, 15)
        stopped_at = time.time()
        os.killpg(groups[2].proc.pid, signal.SIGSTOP)
        time.sleep(8)  # longer than the join timeout and the collective timeout
        os.killpg(groups[2].proc.pid, signal.SIGCONT)
        outputs = [g.wait() for g in groups]
        for code, output in outputs:
            assert code == 0, output
        done = results(out)
    assert len({r["digest"] for r in done.values()}) == 1, "groups differ after the heal"
    survivor = done["0"]
    went_on = [e for e in survivor["log"] if stopped_at < e["at"] < stopped_at + 8]
    assert went_on and all(e["world"] == 2 for e in went_on[1:]), went_on
    assert went_on[-1]["at"] - stopped_at < 8
    assert done["2"]["healed_at"], "the hung group did not take the others' state"
    for r in done.values():
        check_stream(r)


def test_a_group_lost_while_another_joins_leaves_the_rest_identical(store):
    with tempfile.TemporaryDirectory() as out:
        groups = [Group(store, i, out, steps=150) for i in range(3)]
        wait_for_step(out, 1, 10)
        os.killpg(groups[1].proc.pid, signal.SIGKILL)
        replacement = Group(store, 1, out, steps=150, pause_heal_s=2.0)
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(out, "heal.1")):
            assert time.monotonic() < deadline, "the replacement never began to heal"
            time.sleep(0.02)
        os.killpg(groups[2].proc.pid, signal.SIGKILL)  # lost in the middle of the join
        outputs = [groups[0].wait(), replacement.wait()]
        for code, output in outputs:
            assert code == 0, output
        done = results(out)
    assert set(done) == {"0", "1"}
    assert done["0"]["digest"] == done["1"]["digest"], "the join left the groups different"
    assert done["1"]["healed_at"], "the replacement did not take the live group's state"
    for r in done.values():
        check_stream(r)


class HsdpGroup:
    """A replica group of two ranks with haiscale.fsdp inside (its own torch.distributed job)."""

    def __init__(self, store, replica_id, out_dir, steps):
        port = free_port()
        self.procs = []
        for rank in range(2):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), HFREDUCE_NODE_ID=f"group{replica_id}",
                       PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
            self.procs.append(subprocess.Popen(
                [sys.executable, os.path.join(HERE, "rank_runner.py"), "ft_worker:train_hsdp",
                 json.dumps([store, str(replica_id), steps, out_dir])], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                start_new_session=True))

    def kill(self):
        for p in self.procs:
            os.killpg(p.pid, signal.SIGKILL)

    def wait(self, timeout=180):
        out = []
        for p in self.procs:
            try:
                text, _ = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                text, _ = p.communicate()
            out.append((p.returncode, text))
        return out


def test_hsdp_groups_lose_one_and_a_replacement_heals_shard_by_shard(store):
    with tempfile.TemporaryDirectory() as out:
        # Enough steps that group 0 still trains when the replacement arrives (with
        # min_replicas 1, one arriving after the end would train alone from the start).
        groups = [HsdpGroup(store, i, out, 300) for i in range(2)]
        wait_for_step(out, 1, 10)
        groups[1].kill()
        time.sleep(1.0)
        replacement = HsdpGroup(store, 1, out, 300)
        for code, output in groups[0].wait() + replacement.wait():
            assert code == 0, output
        done = {}
        for path in glob.glob(os.path.join(out, "hsdp.*.json")):
            with open(path) as f:
                r = json.load(f)
            done[(r["replica"], r["rank"])] = r
    assert set(done) == {("0", 0), ("0", 1), ("1", 0), ("1", 1)}
    summary = {k: (r["step"], r["digest"][:8], r["healed_at"], [e["world"] for e in r["log"]])
               for k, r in done.items()}
    for rank in (0, 1):  # each shard equal to its counterpart in the other group
        assert done[("0", rank)]["digest"] == done[("1", rank)]["digest"], summary
        assert done[("1", rank)]["healed_at"], "the replacement did not take the live shards"
    assert done[("0", 0)]["digest"] != done[("0", 1)]["digest"]  # they are different shards
    worlds = [e["world"] for e in done[("0", 0)]["log"]]
    assert 1 in worlds and worlds[-1] == 2, worlds


def test_groups_follow_the_quorum_service_to_a_server_they_were_not_given(store):
    """The groups start knowing only server A, which names A and B as the service's servers (as
    hai-server's leader names a replica started after the job). A is killed mid-training: the
    groups re-form on B, which they learnt of from A's quorums, and finish identical."""
    port = free_port()
    first = f"127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as out:
        first_store = hfreduce_store(os.path.join(BUILD, "hfreduce"), tmp, name="first",
                                     listen=first, stores=f"{first},{store}").start()
        try:
            options = {"replicas": 2, "min_replicas": 2, "quorum_timeout": 20.0}
            groups = [Group(first, i, out, steps=STEPS, **options) for i in range(2)]
            wait_for_step(out, "0", 20)
            first_store.kill()
            outcomes = [g.wait() for g in groups]
            for code, output in outcomes:
                assert code == 0, output
            done = results(out)
        finally:
            first_store.kill()
    assert sorted(done) == ["0", "1"], done.keys()
    assert done["0"]["digest"] == done["1"]["digest"]
    assert done["0"]["step"] == done["1"]["step"] == STEPS
    check_stream(done["0"])


def test_below_min_replicas_no_quorum_forms_and_the_survivor_raises(store):
    with tempfile.TemporaryDirectory() as out:
        groups = [Group(store, i, out, step_s=0.05, quorum_timeout=5.0) for i in range(3)]
        wait_for_step(out, 0, 10)
        for g in groups[1:]:
            os.killpg(g.proc.pid, signal.SIGKILL)
        code, output = groups[0].wait(timeout=120)
        with open(os.path.join(out, "too-few.0.json")) as f:
            error = json.load(f)
    assert code == 1, output
    assert "replica groups of job 'ftjob' asked in time" in output, output
    assert error == {"type": "QuorumTooSmall", "timeout": True, "code": "DeadlineExceeded",
                     "reason": "QUORUM_TOO_SMALL", "details": {"asked": "1", "needed": "2"}}, error


def _platform_results(out):
    done = {}
    for path in glob.glob(os.path.join(out, "platform.*.json")):
        with open(path) as f:
            r = json.load(f)
        done[(r["group"], r["rank"])] = r
    return done


def _wait_dead(pid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def _submit_ft(cluster, out, worker_args, *hai_args):
    """Submits ft_worker.train_on_platform(*worker_args) as a job with `hai_args` (--replicas
    ...): one group per node with both its GPUs."""
    command = (f"{sys.executable} {os.path.join(HERE, 'rank_runner.py')} "
               f"ft_worker:train_on_platform '{json.dumps(worker_args)}'")
    return cluster.submit("--nodes", "1", "--gpus-per-node", "2", "--env", "OMP_NUM_THREADS=1",
                          *hai_args, "--", command)


def _stop_after(out, more):
    """Tells the groups of a train_on_platform job to stop `more` steps after group 0's last
    (a step they all reach); returns it."""
    with open(os.path.join(out, "step.0")) as f:
        steps = int(f.read()) + more
    with open(os.path.join(out, "stop_at.tmp"), "w") as f:
        f.write(str(steps))
    os.replace(os.path.join(out, "stop_at.tmp"), os.path.join(out, "stop_at"))
    return steps


def _explain(cluster, job):
    """What a failed wait prints: hai show, and each rank's log of the current run."""
    print(cluster.hai("show", str(job)))
    run = cluster.show(job)["runs"][-1]
    for rank in range(len(run["nodes"]) * 2):
        try:
            print(f"---- rank {rank}:\n{cluster.logs(job, rank)[-2500:]}")
        except RuntimeError as e:
            print(f"---- rank {rank}: {e}")


def test_on_hai_platform_a_job_of_four_groups_survives_a_killed_group_and_a_lost_node():
    """`hai submit --replicas 4 --min-replicas 2`: four replica groups of one node x two ranks
    (haiscale.fsdp inside each). Group 1's ranks are killed -9 mid-step; later the agent of group
    2's node is killed (the node is lost). Each time the other groups go on at once, hai-server
    places a replacement group, which joins at a step boundary with the live state; the job
    succeeds with every group identical, and its loss follows an uninterrupted run's."""
    from hai_cluster import HaiCluster

    steps = 5000  # at most: the test ends the training once it has seen what it needs
    with tempfile.TemporaryDirectory() as d, HaiCluster(d, nodes=5) as cluster:
        out = os.path.join(d, "out")
        os.makedirs(out)
        job = _submit_ft(cluster, out, [steps, out], "--procs-per-node", "2", "--replicas", "4",
                         "--min-replicas", "2", "--name", "ft4")
        wait_for_step(out, "1", 20, timeout=120)
        killed_at = time.time()
        for rank in (0, 1):
            with open(os.path.join(out, f"pid.1.{rank}")) as f:
                os.kill(int(f.read()), signal.SIGKILL)
        wait_for_step(out, "1.1", 1, timeout=120)  # the replacement committed a step
        # The node of replica 2 is lost: its agent dies (its ranks live on, cut off).
        shown = cluster.show(job)
        run = shown["runs"][-1]
        group2 = next(g for g in run["groups"] if g.get("replica", 0) == 2)
        node = run["nodes"][group2.get("firstNode", group2.get("first_node", 0))]
        agent = cluster.agents[int(node[-1])]
        agent.kill()
        lost_at = time.time()
        try:
            wait_for_step(out, "2.1", 1, timeout=120)
        except AssertionError:
            _explain(cluster, job)
            raise
        # The node comes back: the restarted agent kills what no longer belongs there.
        agent.start()
        for rank in (0, 1):
            with open(os.path.join(out, f"pid.2.{rank}")) as f:
                assert _wait_dead(int(f.read()), 30), "the cut-off group outlived its node's return"
        # Twenty steps more with the four groups, then the end: a step the groups all reach.
        steps = _stop_after(out, 40)
        final = cluster.wait_state(job, "SUCCEEDED", timeout=300)
        print(cluster.hai("show", str(job)))  # what hai show tells (pytest -s shows it)
        done = _platform_results(out)
    run = final["runs"][-1]
    assert len(final["runs"]) == 1, "the job was requeued"
    events = "\n".join(e["text"] for e in run["events"])
    assert "replica 1 lost: rank" in events, events
    assert f"replica 2 lost: node {node} lost" in events, events
    assert "replica 1 (replacement 1) started on" in events, events
    assert "replica 2 (replacement 1) started on" in events, events
    assert "quorum: group 1 left the quorum at step" in events, events
    assert "quorum: group 1.1 joined the quorum at step" in events, events
    assert "quorum: group 2.1 joined the quorum at step" in events, events
    assert len(run["groups"]) == 6, run["groups"]
    summary = {k: (r["step"], r["digest"][:8], r["healed_at"]) for k, r in done.items()}
    assert set(done) == {(g, r) for g in ("0", "1.1", "2.1", "3") for r in (0, 1)}, summary
    for rank in (0, 1):
        assert len({done[(g, rank)]["digest"] for g in ("0", "1.1", "2.1", "3")}) == 1, summary
        assert all(done[(g, rank)]["step"] == steps for g in ("0", "1.1", "2.1", "3")), summary
    assert done[("1.1", 0)]["healed_at"] and done[("2.1", 0)]["healed_at"], summary
    survivor = done[("0", 0)]["log"]
    recovered = next(e["at"] for e in survivor if e["at"] > killed_at and e["world"] == 3)
    rejoined = done[("1.1", 0)]["log"][0]["at"]
    replaced = done[("2.1", 0)]["log"][0]["at"]
    print(f"platform ft: kill -9 of a group: the others went on after {recovered - killed_at:.2f}s,"
          f" its replacement's first step after {rejoined - killed_at:.2f}s; node lost: its "
          f"replacement's first step after {replaced - lost_at:.2f}s (heartbeat timeout 5 s)")
    assert recovered - killed_at < 10
    # (The cut-off group trained on until its node came back: then 5 groups, for a while.)
    worlds = [e["world"] for e in survivor]
    assert worlds[-1] == 4, worlds
    # The loss follows an uninterrupted run's: the mean of the last 20 steps within 25%.
    from ft_worker import baseline_losses

    baseline = baseline_losses(steps, 4)
    tail = sum(e["loss"] for e in survivor[-20:]) / 20
    base = sum(baseline[-20:]) / 20
    assert tail < 1.25 * base + 0.01, (tail, base)


def test_on_hai_platform_a_job_with_room_for_min_replicas_starts_and_its_last_group_joins():
    """--replicas 3 --min-replicas 2 with one of three nodes busy: the job starts with two groups
    and trains; when the node frees, replica 2 starts there (as itself, not a replacement),
    joins at a step boundary with the live state, and the three groups end identical."""
    from hai_cluster import HaiCluster

    with tempfile.TemporaryDirectory() as d, HaiCluster(d, nodes=3) as cluster:
        out = os.path.join(d, "out")
        os.makedirs(out)
        blocker = cluster.submit("--nodes", "1", "--gpus-per-node", "2", "--", "sleep 600")
        cluster.wait_state(blocker, "RUNNING")
        job = _submit_ft(cluster, out, [5000, out], "--procs-per-node", "2", "--replicas", "3",
                         "--min-replicas", "2", "--name", "ftgrow")
        try:
            wait_for_step(out, "1", 10, timeout=120)  # two groups train
        except AssertionError:
            _explain(cluster, job)
            raise
        assert len(cluster.show(job)["runs"][-1]["groups"]) == 2
        cluster.hai("stop", str(blocker))
        try:
            wait_for_step(out, "2", 1, timeout=120)  # the third committed a step
        except AssertionError:
            _explain(cluster, job)
            raise
        steps = _stop_after(out, 20)
        final = cluster.wait_state(job, "SUCCEEDED", timeout=180)
        done = _platform_results(out)
    run = final["runs"][-1]
    assert len(final["runs"]) == 1, "the job was requeued"
    events = "\n".join(e["text"] for e in run["events"])
    assert "started with 2 of 3 replica groups" in events, events
    assert "replica 2 started on" in events, events
    assert "replacement" not in events, events
    assert "quorum: group 2 joined the quorum at step" in events, events
    summary = {k: (r["step"], r["digest"][:8], r["healed_at"]) for k, r in done.items()}
    assert set(done) == {(g, r) for g in ("0", "1", "2") for r in (0, 1)}, summary
    for rank in (0, 1):
        assert len({done[(g, rank)]["digest"] for g in ("0", "1", "2")}) == 1, summary
        assert all(done[(g, rank)]["step"] == steps for g in ("0", "1", "2")), summary
    assert done[("2", 0)]["healed_at"], summary  # it took the live state, not step 0's


def test_on_hai_platform_below_min_replicas_the_job_is_requeued_and_resumes_from_its_checkpoint():
    """--replicas 2 --min-replicas 2: a group's node dies (its agent and its ranks killed -9).
    One group is below the minimum, so the run ends as a gang's would and the job is requeued;
    its next run resumes every group from the last asynchronous checkpoint and succeeds."""
    from hai_cluster import HaiCluster

    with tempfile.TemporaryDirectory() as d, HaiCluster(d, nodes=3) as cluster:
        out = os.path.join(d, "out")
        os.makedirs(out)
        job = _submit_ft(cluster, out, [5000, out, 0.05, 10], "--replicas", "2",
                         "--min-replicas", "2", "--name", "ftmin")
        try:
            wait_for_step(out, "1", 25, timeout=120)
        except AssertionError:
            _explain(cluster, job)
            raise
        run = cluster.show(job)["runs"][-1]
        group1 = next(g for g in run["groups"] if g.get("replica", 0) == 1)
        node = run["nodes"][group1.get("firstNode", group1.get("first_node", 0))]
        cluster.agents[int(node[-1])].kill()
        with open(os.path.join(out, "pid.1.0")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        with open(os.path.join(out, "step.0")) as f:
            before = int(f.read())
        deadline = time.monotonic() + 120
        while len(cluster.show(job)["runs"]) < 2:
            assert time.monotonic() < deadline, cluster.hai("show", str(job))
            time.sleep(0.2)
        try:
            wait_for_step(out, "0", before + 20, timeout=120)  # the new run trains on
        except AssertionError:
            _explain(cluster, job)
            raise
        with open(os.path.join(out, "stop_at"), "w") as f:
            f.write(str(before + 40))
        final = cluster.wait_state(job, "SUCCEEDED", timeout=180)
        done = _platform_results(out)
    runs = final["runs"]
    assert len(runs) == 2, runs
    assert "below min_replicas 2" in runs[0]["end_reason"], runs[0]
    assert runs[0]["end"] == "RUN_NODE_LOST", runs[0]
    assert set(done) == {("0", 0), ("1", 0)}, done.keys()
    assert done[("0", 0)]["digest"] == done[("1", 0)]["digest"]
    for r in done.values():
        assert r["run"] == 1
        # Resumed from a checkpoint (every 10 steps) taken before the node died, not from 0.
        assert 10 <= r["resumed_from"] <= before and r["resumed_from"] % 10 == 0, r["resumed_from"]
        assert r["log"][0]["step"] == r["resumed_from"] + 1, r["log"][:2]
        assert r["step"] == before + 40


def test_on_ha_hai_platform_the_groups_follow_the_quorum_service_through_a_failover():
    """hai-server as a leader and a standby on etcd: HAI_FT_STORE lists both replicas' quorum
    services, of which the leader's serves. The leader is killed -9 while two replica groups
    train; the standby takes over, serves the quorums in a new epoch, the groups find it, re-form
    once and go on: the job succeeds in its first run with both groups identical."""
    from hai_cluster import HaiCluster

    with tempfile.TemporaryDirectory() as d, HaiCluster(d, nodes=2, ha=True) as cluster:
        out = os.path.join(d, "out")
        os.makedirs(out)
        job = _submit_ft(cluster, out, [5000, out], "--replicas", "2", "--min-replicas", "2",
                         "--name", "ftha")
        wait_for_step(out, "0", 20, timeout=120)
        run = cluster.show(job)["runs"][-1]
        ft_store = run.get("ft_store", run.get("ftStore", ""))
        assert len(ft_store.split(",")) == 2, (
            f"the ranks were given {ft_store!r}, not both replicas' quorum services; the "
            f"servers said:\n{cluster.servers[0].log_tail()}\n{cluster.servers[1].log_tail()}")
        cluster.servers[0].kill()
        failed_over_at = time.time()
        # Training goes on past the failover: 60 more steps than when the leader died.
        with open(os.path.join(out, "step.0")) as f:
            target = int(f.read()) + 60
        try:
            wait_for_step(out, "0", target, timeout=120)
        except AssertionError:
            for rank in (0, 1):
                print(f"---- rank {rank}:\n{cluster.logs(job, rank)[-3000:]}")
            raise
        went_on_at = time.time()
        with open(os.path.join(out, "stop_at"), "w") as f:
            f.write(str(target + 20))
        final = cluster.wait_state(job, "SUCCEEDED", timeout=180)
        print(cluster.hai("show", str(job)))
        done = _platform_results(out)
    assert len(final["runs"]) == 1, "the job was requeued"
    events = "\n".join(e["text"] for e in final["runs"][-1].get("events", []))
    # The new leader's quorum service formed the groups' quorum afresh, past the kill.
    formed = [int(m) for m in re.findall(r"quorum: groups 0, 1 formed the quorum at step (\d+)",
                                         events)]
    assert formed and max(formed) >= 20, events
    assert set(done) == {("0", 0), ("1", 0)}, done.keys()
    assert done[("0", 0)]["digest"] == done[("1", 0)]["digest"]
    assert done[("0", 0)]["step"] == target + 20
    print(f"ha ft: 60 steps more {went_on_at - failed_over_at:.1f}s after the leader's kill")
