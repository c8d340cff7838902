"""haiscale.checkpoint: exact round trips (FSDP sharded and full), a failed save commits nothing,
a process killed mid-save never leaves a half checkpoint as the latest, and a training job
suspended and resumed by a real HAI-Platform (hai-server, two hai-agents, the hai CLI) ends with
the same parameters as the same job run without interruption."""

import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
import torch
from hai_cluster import HaiCluster
from launch import run

from haiscale import checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(REPO, "haiscale", "examples", "train_gpt.py")


def test_checkpoint_round_trip_is_exact_and_a_failed_save_commits_nothing(tmp_path):
    run("haiscale_parallel_worker:checkpoint_round_trip", 2, 2, args=[str(tmp_path)])
    # a sharded checkpoint refuses another number of ranks (here: one process)
    with pytest.raises(RuntimeError, match="sharded over 4 ranks"):
        checkpoint.load(str(tmp_path / "sharded"))
    step, state = checkpoint.load(str(tmp_path / "full"))  # a full one loads anywhere
    assert step == 3 and "blocks.0.attn.qkv.weight" in state["model"]


SAVER = textwrap.dedent("""
    import sys, torch
    from haiscale import checkpoint
    directory = sys.argv[1]
    step = checkpoint.latest_step(directory) or 0
    while True:
        step += 1
        # 24 MB of the step's value, so that a kill lands mid-write often
        checkpoint.save(directory, step, {"step": step, "w": torch.full((6_000_000,), float(step))})
        print(step, flush=True)
""")


def test_an_async_checkpoint_stalls_for_the_host_copy_only_and_is_exact(tmp_path):
    """save() returns once the state is copied; the write goes on meanwhile; the checkpoint holds
    the state as it was at save(), not as training changed it after; a failed write raises."""
    big = torch.randn(64 << 20 >> 2)  # 64 MiB
    state = {"step": 3, "model": {"w": big}, "extra": [1, (2.5, "x")]}
    expected = big.clone()
    saver = checkpoint.AsyncCheckpointer(str(tmp_path / "ckpt"))
    start = time.monotonic()
    saver.save(3, state)
    returned = time.monotonic() - start
    written_then = checkpoint.latest_step(str(tmp_path / "ckpt"))
    big.add_(1.0)  # training goes on and changes the parameters
    saver.wait()
    total = time.monotonic() - start
    assert written_then is None, "save() waited for the write"
    assert returned < total
    step, loaded = checkpoint.load(str(tmp_path / "ckpt"))
    assert step == 3 and saver.last_saved == 3
    assert torch.equal(loaded["model"]["w"], expected)
    assert loaded["extra"] == [1, (2.5, "x")]
    # A write that fails is reported by the next call, and commits nothing.
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    bad = checkpoint.AsyncCheckpointer(str(blocked / "ckpt"))
    bad.save(1, {"w": torch.ones(3)})
    with pytest.raises(RuntimeError, match="asynchronous checkpoint failed"):
        bad.wait()
    bad.wait()  # reported once


def test_a_process_killed_mid_save_leaves_the_previous_checkpoint_as_latest(tmp_path):
    directory = str(tmp_path / "ckpt")
    rng = random.Random(5)
    seen = 0
    for _attempt in range(6):
        p = subprocess.Popen([sys.executable, "-c", SAVER, directory], stdout=subprocess.PIPE, text=True)
        first = p.stdout.readline()  # at least one save of this run completed
        assert first, "the saver never saved"
        time.sleep(rng.uniform(0.0, 0.4))
        p.send_signal(signal.SIGKILL)
        p.wait()
        step, state = checkpoint.load(directory)
        assert step > seen and state["step"] == step, (step, seen)
        assert torch.all(state["w"] == float(step)), "a torn checkpoint was taken as the latest"
        # A kill between the rename into place and the update of `latest` leaves one newer,
        # complete but unacknowledged checkpoint beside the latest; none is ever torn.
        steps = checkpoint.list_checkpoints(directory)
        assert step in steps and all(s <= step + 1 for s in steps), (steps, step)
        for s in steps:
            _, other = checkpoint.load(directory, step=s)
            assert other["step"] == s and torch.all(other["w"] == float(s)), s
        seen = step


def _final_states(directory, world):
    return [torch.load(os.path.join(directory, f"final.rank{r}"), weights_only=False) for r in range(world)]


@pytest.mark.parametrize("layout", [["--fsdp", "4"], ["--dp", "2", "--pp", "2"]])
def test_a_job_suspended_and_resumed_by_the_platform_ends_like_an_uninterrupted_one(layout):
    with tempfile.TemporaryDirectory() as d, HaiCluster(d, nodes=2) as cluster:
        out = {name: os.path.join(d, name) for name in ("interrupted", "straight")}
        for path in out.values():
            os.makedirs(path)
        ids = {}
        for name, path in out.items():
            command = (f"{sys.executable} {TRAIN} {' '.join(layout)} --steps 150 --log-every 5 "
                       f"--final-state {path}/final")
            ids[name] = cluster.submit("--nodes", "2", "--gpus-per-node", "2", "--procs-per-node", "2",
                                       "--env", "OMP_NUM_THREADS=1", "--name", name, "--", command)
            if name == "interrupted":
                cluster.wait_log(ids[name], "step    20")
                cluster.hai("suspend", str(ids[name]))
                job = cluster.wait_state(ids[name], "SUCCEEDED", timeout=240)
            else:
                job = cluster.wait_state(ids[name], "SUCCEEDED", timeout=240)
        job = cluster.show(ids["interrupted"])
        assert len(job["runs"]) == 2, job
        assert job["runs"][0]["end_reason"] == "suspended", job
        log = cluster.logs(ids["interrupted"])  # both runs, each under a header
        first, _, second = log.partition("run 1 rank 0")
        saved = re.search(r"checkpointed step (\d+)", first)
        assert saved and "step   150" not in first, log
        assert f"starting at step {saved.group(1)}" in second and "step   150" in second, log
        for got, expected in zip(_final_states(out["interrupted"], 4), _final_states(out["straight"], 4)):
            assert set(got) == set(expected)
            for name in expected:
                assert torch.equal(got[name], expected[name]), name
