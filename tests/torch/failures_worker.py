"""Ranks that die, raise, disagree or stall, and what the other ranks see."""

import datetime
import os
import time

import torch
import torch.distributed as dist

import haiscale  # noqa: F401


def allreduce_until_error(raise_on_rank=-1, steps_before_raise=5):
    """Allreduces in a loop; returns when a collective raises (the error and when it came).
    Rank `raise_on_rank` raises a ValueError of its own mid-loop instead."""
    dist.init_process_group("hfreduce")
    rank = dist.get_rank()
    t = torch.ones(100_000)
    step = 0
    try:
        while True:
            dist.all_reduce(t)
            t.fill_(1.0)
            step += 1
            if step == 3:
                open(os.path.join(os.environ["MARKER_DIR"], f"running.{rank}"), "w").close()
            if rank == raise_on_rank and step == steps_before_raise:
                raise ValueError("a bug in rank %d's training step" % rank)
            if step > 1_000_000:
                return {"error": None}
    except RuntimeError as e:
        return {"error": str(e), "at": time.time(), "steps": step}


def mismatched_counts():
    dist.init_process_group("hfreduce")
    n = 10 if dist.get_rank() == 0 else 11
    try:
        dist.all_reduce(torch.ones(n))
    except RuntimeError as e:
        return {"error": str(e)}
    return {"error": None}


def stalled_rank(stall_rank, timeout_s, stall_s, op="all_reduce", backend="hfreduce"):
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    if dist.get_rank() == stall_rank:
        time.sleep(stall_s)
    start = time.time()
    try:
        if op == "barrier":
            dist.barrier()
        else:
            dist.all_reduce(torch.ones(1000))
    except RuntimeError as e:
        return {"error": str(e), "type": type(e).__name__, "waited": time.time() - start}
    return {"error": None, "waited": time.time() - start}


def _threads():
    return len(os.listdir("/proc/self/task"))


def _hfreduce_mappings():
    with open("/proc/self/maps") as f:
        return [line.strip() for line in f if "hfreduce" in line]


def destroy_leaves_nothing(cycles):
    """init / collectives on the world and a subgroup / destroy, `cycles` times: the thread count
    comes back down and no HFReduce shared memory stays mapped."""
    torch.ones(1).add_(1)  # torch's own lazily started threads, before the baseline
    baseline = _threads()
    during, after = [], []
    for cycle in range(cycles):
        dist.init_process_group("hfreduce", init_method=f"tcp://127.0.0.1:{int(os.environ['MASTER_PORT']) + cycle}",
                                rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
        world = dist.get_world_size()
        group = dist.new_group(list(range(0, world, 2)))
        t = torch.ones(300_000)
        dist.all_reduce(t)
        if dist.get_rank() % 2 == 0:
            dist.all_reduce(t, group=group)
        peer = dist.get_rank() ^ 1
        if peer < world:
            w = dist.isend(torch.ones(10), peer)
            dist.recv(torch.empty(10), peer)
            w.wait()
        during.append(_threads())
        mapped = len(_hfreduce_mappings())
        dist.destroy_process_group()
        after.append(_threads())
        if _hfreduce_mappings():
            raise AssertionError(f"HFReduce memory still mapped after destroy: {_hfreduce_mappings()}")
    return {"baseline": baseline, "during": during, "after": after, "mapped_during": mapped}
