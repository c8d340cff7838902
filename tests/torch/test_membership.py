"""A group whose membership changes while its ranks live (issue 36's HFReduce part): abort fails
what is pending at once on every rank; torch.distributed.shrink_group makes the group of the
survivors; a group re-formed with a newly started rank (haiscale.new_process_group) works and
hands it rank 0's state. Every rank is a separate process."""

import datetime
import json
import os
import subprocess
import sys

import pytest
import torch.distributed as dist
from launch import HERE, Ranks, free_port


def everyone(outcomes):
    return "\n".join(f"---- rank {o.rank} exited {o.returncode} ----\n{o.output[-3000:]}"
                     for o in outcomes)


# (nodes, ranks per node, floats per allreduce): the pipelined path across emulated nodes, and
# the latency path (one node, under HFREDUCE_SMALL_BYTES) with a 4 KiB message.
LAYOUTS = [
    pytest.param(2, 2, 1 << 16, id="2x2-pipeline"),
    pytest.param(1, 3, 1 << 10, id="1x3-latency-path"),
]


@pytest.mark.parametrize("nodes,per_node,numel", LAYOUTS)
def test_abort_fails_the_pending_allreduce_of_every_rank_at_once(nodes, per_node, numel):
    # The last rank hangs, rank 0 aborts after 0.3 s; the timeout is 60 s.
    world = nodes * per_node
    outcomes = Ranks("membership_worker:abort_while_a_rank_hangs", nodes, per_node,
                     args=[world - 1, numel], env={"HFREDUCE_TIMEOUT_MS": "60000"}).wait(timeout=120)
    for o in outcomes:
        assert o.ok, everyone(outcomes)
    for o in outcomes[:-1]:
        assert o.result["error"] and "abort" in o.result["error"], o.result
        assert o.result["waited"] < 3, o.result


@pytest.mark.parametrize("nodes,per_node,numel", LAYOUTS)
def test_shrink_group_without_a_dead_rank_goes_on_reducing(nodes, per_node, numel):
    world = nodes * per_node
    outcomes = Ranks("membership_worker:shrink_after_a_rank_dies", nodes, per_node,
                     args=[1, numel], env={"HFREDUCE_TIMEOUT_MS": "60000"}).wait(timeout=120)
    assert outcomes[1].returncode == 42, everyone(outcomes)
    survivors = [o for o in outcomes if o.rank != 1]
    shrunk = world * (world + 1) / 2 - 2  # every rank adds rank + 1; rank 1 is gone
    for new_rank, o in enumerate(survivors):
        assert o.ok, everyone(outcomes)
        r = o.result
        assert r["error"] and "rank 1" in r["error"], r
        assert r["rank"] == new_rank and r["size"] == world - 1, r
        assert r["sums"] == [shrunk] * 3, r


@pytest.mark.parametrize("nodes,per_node,numel", LAYOUTS)
def test_survivors_regroup_and_a_new_rank_joins_with_rank_0s_state(nodes, per_node, numel):
    world = nodes * per_node
    full = world * (world + 1) / 2
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=60))
    ranks = Ranks("membership_worker:survive_and_regrow", nodes, per_node,
                  args=[port, 1, world, numel], env={"HFREDUCE_TIMEOUT_MS": "60000"})
    assert ranks.procs[1].wait(timeout=60) == 42
    env = dict(os.environ, HFREDUCE_NODE_ID="node0", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    joiner = subprocess.run([sys.executable, os.path.join(HERE, "rank_runner.py"),
                             "membership_worker:join", json.dumps([port, 1, world, numel])],
                            env=env, capture_output=True, text=True, timeout=120)
    outcomes = ranks.wait(timeout=120)
    assert joiner.returncode == 0, joiner.stdout + joiner.stderr
    assert '"state_equal": true' in joiner.stdout, joiner.stdout
    assert f'"sum": {full}' in joiner.stdout, joiner.stdout
    for o in outcomes:
        if o.rank == 1:
            continue
        assert o.ok, everyone(outcomes)
        assert o.result["error"], o.result
        assert o.result["shrunk_sum"] == full - 2 and o.result["sum"] == full, o.result
        assert o.result["state_equal"], o.result
    del store
