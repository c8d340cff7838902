"""Ranks whose group changes while they live: abort, shrink_group, and a group re-formed with a
newly started rank (haiscale.new_process_group)."""

import datetime
import faulthandler
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

import haiscale

# A rank stuck past the test's patience says where before the launcher kills it.
faulthandler.dump_traceback_later(90, exit=False, file=sys.stdout)


def abort_while_a_rank_hangs(hung_rank, numel=1 << 16):
    """Every rank but `hung_rank` starts an allreduce of `numel` floats that `hung_rank` never
    joins; rank 0 aborts the group 0.3 s later. Returns how long each waited and what it was
    told."""
    dist.init_process_group("hfreduce")
    rank = dist.get_rank()
    t = torch.ones(numel)
    dist.all_reduce(t)
    start = time.time()
    if rank == hung_rank:
        time.sleep(4)  # hung; then leaves without issuing it
        return {"hung": True}
    if rank == 0:
        # ProcessGroup.abort() (torch's _abort_process_group also drops the default store, which
        # rank 0 serves here: the others could not read the published cause)
        threading.Timer(0.3, lambda: dist.group.WORLD.abort()).start()
    try:
        dist.all_reduce(t)
        error = None
    except RuntimeError as e:
        error = str(e)
    waited = time.time() - start
    if rank == 0:
        time.sleep(3)  # serves the store, where the cause is published
    return {"error": error, "waited": waited}


def shrink_after_a_rank_dies(dead_rank, numel=1 << 16):
    """`dead_rank` dies after two steps; the others see the failure, shrink the default group
    without it (torch.distributed.shrink_group) and go on reducing `numel` floats."""
    dist.init_process_group("hfreduce")
    rank = dist.get_rank()
    t = torch.ones(numel)
    for _ in range(2):
        dist.all_reduce(t)
        t.fill_(1.0)
    if rank == dead_rank:
        os._exit(42)
    try:
        for _ in range(100):
            dist.all_reduce(t)
            t.fill_(1.0)
        return {"error": None}
    except RuntimeError as e:
        error = str(e)
    dist.shrink_group([dead_rank])
    sums = []
    for _ in range(3):
        t.fill_(float(rank + 1))
        dist.all_reduce(t)
        sums.append(t[-1].item())
    return {"error": error, "rank": dist.get_rank(), "size": dist.get_world_size(), "sums": sums,
            "backend": dist.get_backend()}


def _store(port):
    return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60))


def survive_and_regrow(store_port, dead_rank, world, numel=1 << 16):
    """A group re-formed at each change, as a fault-tolerant job does, through a store that outlives
    every rank (served by the test): `dead_rank` dies; the others abort, form a group of the
    survivors and reduce in it; then they form one with a newly started rank in the dead one's
    place (`join`), which gets rank 0's state."""
    rank = int(os.environ["RANK"])
    store = _store(store_port)
    pg = haiscale.new_process_group(dist.PrefixStore("gen0", store), rank, world)
    t = torch.ones(numel)
    for _ in range(2):
        dist.all_reduce(t, group=pg)
        t.fill_(1.0)
    if rank == dead_rank:
        os._exit(42)
    try:
        for _ in range(100):
            dist.all_reduce(t, group=pg)
            t.fill_(1.0)
        return {"error": None}
    except RuntimeError as e:
        error = str(e)
    pg.abort()
    survivors = [r for r in range(world) if r != dead_rank]
    small = haiscale.new_process_group(dist.PrefixStore("gen1", store), survivors.index(rank),
                                       len(survivors))
    t.fill_(float(rank + 1))
    dist.all_reduce(t, group=small)
    shrunk_sum = t[-1].item()
    small.shutdown()
    result = _joined(store, rank, world, numel)
    result.update(error=error, shrunk_sum=shrunk_sum)
    return result


def join(store_port, rank, world, numel=1 << 16):
    """A newly started rank joining the survivors of survive_and_regrow."""
    return _joined(_store(store_port), rank, world, numel)


def _joined(store, rank, world, numel):
    pg = haiscale.new_process_group(dist.PrefixStore("gen2", store), rank, world)
    t = torch.full((numel,), float(rank + 1))
    dist.all_reduce(t, group=pg)
    state = torch.randn(10_000, generator=torch.Generator().manual_seed(7))
    if rank != 0:
        state.zero_()
    pg.broadcast(state, 0).wait()
    expected = torch.randn(10_000, generator=torch.Generator().manual_seed(7))
    pg.shutdown()
    return {"sum": t[-1].item(), "state_equal": bool(torch.equal(state, expected))}
