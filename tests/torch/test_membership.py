"""A group whose membership changes while its ranks live (issue 36's HFReduce part): abort fails
what is pending at once on every rank; torch.distributed.shrink_group makes the group of the
survivors; a group re-formed with a newly started rank (haiscale.new_process_group) works and
hands it rank 0's state. Every rank is a separate process."""

import datetime
import os
import subprocess
import sys

import torch.distributed as dist
from launch import HERE, Ranks, free_port


def everyone(outcomes):
    return "\n".join(f"---- rank {o.rank} exited {o.returncode} ----\n{o.output[-3000:]}"
                     for o in outcomes)


def test_abort_fails_the_pending_allreduce_of_every_rank_at_once():
    # Rank 3 hangs (node 1), rank 0 aborts after 0.3 s; the timeout is 60 s.
    outcomes = Ranks("membership_worker:abort_while_a_rank_hangs", 2, 2, args=[3],
                     env={"HFREDUCE_TIMEOUT_MS": "60000"}).wait(timeout=120)
    for o in outcomes:
        assert o.ok, everyone(outcomes)
    for o in outcomes[:3]:
        assert o.result["error"] and "abort" in o.result["error"], o.result
        assert o.result["waited"] < 3, o.result


def test_shrink_group_without_a_dead_rank_goes_on_reducing():
    outcomes = Ranks("membership_worker:shrink_after_a_rank_dies", 2, 2, args=[1],
                     env={"HFREDUCE_TIMEOUT_MS": "60000"}).wait(timeout=120)
    assert outcomes[1].returncode == 42, everyone(outcomes)
    for o, new_rank in zip([outcomes[0], outcomes[2], outcomes[3]], [0, 1, 2]):
        assert o.ok, everyone(outcomes)
        r = o.result
        assert r["error"] and "rank 1" in r["error"], r
        assert r["rank"] == new_rank and r["size"] == 3, r
        assert r["sums"] == [8.0, 8.0, 8.0], r  # ranks 0, 2, 3 add 1, 3 and 4


def test_survivors_regroup_and_a_new_rank_joins_with_rank_0s_state():
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=60))
    ranks = Ranks("membership_worker:survive_and_regrow", 2, 2, args=[port, 1, 4],
                  env={"HFREDUCE_TIMEOUT_MS": "60000"})
    assert ranks.procs[1].wait(timeout=60) == 42
    env = dict(os.environ, HFREDUCE_NODE_ID="node0", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    joiner = subprocess.run([sys.executable, os.path.join(HERE, "rank_runner.py"),
                             "membership_worker:join", f"[{port}, 1, 4]"], env=env,
                            capture_output=True, text=True, timeout=120)
    outcomes = ranks.wait(timeout=120)
    assert joiner.returncode == 0, joiner.stdout + joiner.stderr
    assert '"state_equal": true' in joiner.stdout and '"sum": 10.0' in joiner.stdout, joiner.stdout
    for o in (outcomes[0], outcomes[2], outcomes[3]):
        assert o.ok, everyone(outcomes)
        assert o.result["error"], o.result
        assert o.result["shrunk_sum"] == 8.0 and o.result["sum"] == 10.0, o.result
        assert o.result["state_equal"], o.result
    del store
