"""Failures over "hfreduce": a killed rank, a rank raising mid-step, mismatched calls and a stalled
rank make every other rank raise RuntimeError naming the cause, within seconds, never a hang;
the init timeout is honoured; destroy_process_group leaves no thread and no shared memory; the
backend starts under torchrun and with tcp:// rendezvous."""

import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from launch import HERE, Ranks, free_port, run


def wait_for_markers(directory, ranks, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(os.path.exists(os.path.join(directory, f"running.{r}")) for r in ranks):
            return
        time.sleep(0.05)
    raise AssertionError(f"ranks {ranks} never started their loop")


def test_a_killed_rank_makes_every_other_rank_raise_within_seconds():
    with tempfile.TemporaryDirectory() as markers:
        ranks = Ranks("failures_worker:allreduce_until_error", 2, 2, env={"MARKER_DIR": markers})
        wait_for_markers(markers, range(4))
        killed_at = time.time()
        ranks.kill(3)  # a non-leader rank of node 1
        outcomes = ranks.wait(timeout=120)
    assert outcomes[3].returncode == -signal.SIGKILL
    for o in outcomes[:3]:
        assert o.ok, o.output
        assert o.result["error"], o.output
        assert "hfreduce" in o.result["error"], o.result
        assert o.result["at"] - killed_at < 15, (o.rank, o.result["at"] - killed_at, o.result)
    # Every rank learns who died: its own leader saw the process go, the other node is told the
    # cause its neighbour published before cutting the connection.
    for o in outcomes[:3]:
        assert "rank 3" in o.result["error"] and "exited" in o.result["error"], o.result


def test_a_killed_leader_makes_the_other_nodes_raise():
    with tempfile.TemporaryDirectory() as markers:
        ranks = Ranks("failures_worker:allreduce_until_error", 3, 1, env={"MARKER_DIR": markers})
        wait_for_markers(markers, range(3))
        killed_at = time.time()
        ranks.kill(1)
        outcomes = ranks.wait(timeout=120)
    for o in (outcomes[0], outcomes[2]):
        assert o.ok and o.result["error"], o.output
        assert o.result["at"] - killed_at < 15, o.result


def test_a_rank_raising_mid_step_makes_the_others_raise():
    with tempfile.TemporaryDirectory() as markers:
        outcomes = Ranks("failures_worker:allreduce_until_error", 2, 2, args=[1, 20],
                         env={"MARKER_DIR": markers}).wait(timeout=120)
    assert outcomes[1].returncode == 1 and "a bug in rank 1" in outcomes[1].output
    for o in (outcomes[0], outcomes[2], outcomes[3]):
        assert o.ok and o.result["error"], o.output


def test_mismatched_calls_are_named_on_every_rank():
    for nodes, per_node in [(1, 2), (2, 1), (2, 2)]:
        results = run("failures_worker:mismatched_counts", nodes, per_node, timeout=60)
        for r in results:
            assert r["error"] and "disagree" in r["error"], r
            assert "10 x fp32" in r["error"] and "11 x fp32" in r["error"], r


def test_the_init_process_group_timeout_is_honoured():
    # Rank 3 stalls for 20 s; the timeout is 3 s, so its peers give up long before it returns.
    results = run("failures_worker:stalled_rank", 2, 2, args=[3, 3, 20], timeout=120)
    for rank in (0, 1, 2):
        assert results[rank]["error"], results[rank]
        assert results[rank]["waited"] < 12, results[rank]


def test_destroy_process_group_leaves_no_thread_and_no_shared_memory():
    results = run("failures_worker:destroy_leaves_nothing", 2, 2, args=[3], timeout=180)
    for r in results:
        assert r["mapped_during"] > 0, r  # the check looks at the right thing
        assert min(r["during"]) >= r["baseline"] + 3, r  # the backend's threads were there
        # Every thread the backend started is gone (torch's own store client may keep a few).
        assert r["after"][-1] <= r["baseline"] + 2, r
        assert r["after"][-1] == r["after"][0], r  # nothing accumulates across cycles
    leftover = [f for f in os.listdir("/dev/shm") if f.startswith("hfreduce")]
    assert not leftover, leftover


def test_torchrun_launches_a_script_over_hfreduce():
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("HFREDUCE_NODE_ID", None)
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "3",
         "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
         os.path.join(HERE, "torchrun_script.py")],
        env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    for rank in range(3):
        want = f"torchrun rank {rank}/3: allreduce ok, ddp step ok, {{'nodes': 1, 'transport': 'shm'}}"
        assert want in out.stdout, out.stdout


@pytest.mark.parametrize("nodes,per_node", [(1, 2), (2, 1), (2, 2)], ids=["1x2", "2x1", "2x2"])
def test_a_barrier_a_peer_never_joins_raises_like_gloo_within_the_timeout(nodes, per_node):
    # The last rank stalls 6 s; the others' barrier raises at the 3 s timeout, a RuntimeError
    # whose words ("Timed out") are gloo's, which callers match.
    world = nodes * per_node
    results = run("failures_worker:stalled_rank", nodes, per_node,
                  args=[world - 1, 3, 6, "barrier"], timeout=120)
    for r in results[:-1]:
        assert r["type"] == "RuntimeError" and "Timed out" in r["error"], r
        assert 2.5 < r["waited"] < 10, r
