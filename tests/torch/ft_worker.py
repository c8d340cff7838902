"""One replica group (one process) of a fault-tolerant job over haiscale.ft: a small regression
model trained with Adam on a sample stream indexed by position; it logs every committed step and
writes its final state's digest."""

import faulthandler
import hashlib
import json
import os
import sys
import time

import torch

import haiscale
import haiscale.checkpoint
from haiscale.errors import QuorumTooSmall

# A group stuck past the test's patience says where before it is killed.
faulthandler.dump_traceback_later(150, exit=False, file=sys.stdout)

DIM = 32
SAMPLES = 4096


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, DIM, generator=g)
    w = torch.randn(DIM, 1, generator=g)
    y = torch.tanh(x @ w) + 0.05 * torch.randn(SAMPLES, 1, generator=g)
    return x, y


def _digest(manager):
    h = hashlib.sha256()
    for t in manager.model.state_dict().values():
        h.update(t.detach().contiguous().numpy().tobytes())
    for group in manager.optimizer.state_dict()["state"].values():
        for v in group.values():
            if torch.is_tensor(v):
                h.update(v.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _mark_step(marker, step):
    """Writes the group's committed step where the test watches it (atomically)."""
    with open(marker + ".tmp", "w") as f:
        f.write(str(step))
    os.replace(marker + ".tmp", marker)


def _sharded_digest(model):
    """A digest of this rank's shards of a haiscale.fsdp model (equal across groups after a
    heal, different between a group's ranks)."""
    h = hashlib.sha256()
    for _, v in sorted(model.sharded_state_dict().items()):
        if torch.is_tensor(v):
            h.update(v.numpy().tobytes())
    return h.hexdigest()


def train(store, replica_id, steps, out_dir, options=None):
    """options: step_s (sleep per step), replicas, min_replicas, quorum_timeout, pause_heal_s (a
    group that receives state first writes heal.<id> and sleeps this long: a window for the test
    to lose another group during the join), start_after (a path: the process, torch imported,
    waits for it to exist before it joins, so that a test can start a replacement the moment it
    chooses rather than after an import that takes seconds on a loaded machine)."""
    options = options or {}
    while options.get("start_after") and not os.path.exists(options["start_after"]):
        if not os.path.isdir(out_dir):
            raise RuntimeError("the test ended before it started this group")
        time.sleep(0.01)
    store = store or os.environ["HAI_FT_STORE"]  # on HAI-Platform: hai-server's quorums
    with open(os.path.join(out_dir, f"pid.{replica_id}"), "w") as f:
        f.write(str(os.getpid()))
    step_s = options.get("step_s", 0.05)
    replicas = options.get("replicas", 3)
    min_replicas = options.get("min_replicas", 2)
    quorum_timeout = options.get("quorum_timeout", 60.0)
    pause_heal_s = options.get("pause_heal_s", 0)
    torch.manual_seed(1234)  # the same initial model everywhere (a joiner takes the live state)
    model = torch.nn.Sequential(torch.nn.Linear(DIM, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    x, y = _data()
    ft = haiscale.ft.Manager(model, opt, batch_size=16, replica_id=replica_id, replicas=replicas,
                             min_replicas=min_replicas, store_address=store, job="ftjob",
                             join_timeout=1.0, timeout=5.0, quorum_timeout=quorum_timeout)
    if pause_heal_s:
        heal = ft._heal

        def slow_heal(q):
            if ft.step < q["max_step"]:
                open(os.path.join(out_dir, f"heal.{replica_id}"), "w").close()
                time.sleep(pause_heal_s)
            heal(q)

        ft._heal = slow_heal
    log = []
    marker = os.path.join(out_dir, f"step.{replica_id}")
    while True:
        try:
            world = ft.start_step()
        except QuorumTooSmall as e:  # a typed error: what the test checks
            with open(os.path.join(out_dir, f"too-few.{replica_id}.json"), "w") as f:
                json.dump({"type": type(e).__name__, "timeout": isinstance(e, TimeoutError),
                           "code": e.code, "reason": e.reason, "details": e.details}, f)
            raise
        if ft.step >= steps:
            break
        index = torch.tensor([i % SAMPLES for i in ft.batch_indices()])
        loss = torch.nn.functional.mse_loss(model(x[index]), y[index])
        loss.backward()
        time.sleep(step_s)  # the rest of a real step's compute
        samples_before = ft.samples
        if ft.sync_gradients():
            opt.step()
            log.append({"step": ft.step, "world": world, "samples_before": samples_before,
                        "loss": loss.item(), "at": time.time()})
            _mark_step(marker, ft.step)
        opt.zero_grad()
    result = {"replica": replica_id, "step": ft.step, "samples": ft.samples, "log": log,
              "healed_at": ft.healed_at, "digest": _digest(ft)}
    ft.shutdown()
    with open(os.path.join(out_dir, f"result.{replica_id}.{os.getpid()}.json"), "w") as f:
        json.dump(result, f)
    return {"step": ft.step, "digest": result["digest"], "healed_at": ft.healed_at}


def train_hsdp(store, replica_id, steps, out_dir):
    """One rank of a replica group of two ranks sharding the model with haiscale.fsdp (HSDP):
    torch.distributed's default group is the replica group (RANK, WORLD_SIZE, MASTER_* of the
    group); the groups average the shards' gradients rank by rank."""
    import torch.distributed as dist

    from haiscale.fsdp import FullyShardedDataParallel

    dist.init_process_group("hfreduce")
    rank = dist.get_rank()
    torch.manual_seed(1234)
    model = FullyShardedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(DIM, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    x, y = _data()
    ft = haiscale.ft.Manager(model, opt, batch_size=16, replica_id=replica_id, replicas=2,
                             min_replicas=1, store_address=store, job="hsdp", join_timeout=1.0,
                             timeout=5.0, quorum_timeout=60.0)
    marker = os.path.join(out_dir, f"step.{replica_id}")
    log = []
    while True:
        world = ft.start_step()
        if ft.step >= steps:
            break
        index = torch.tensor([i % SAMPLES for i in list(ft.batch_indices())[rank::2]])
        loss = torch.nn.functional.mse_loss(model(x[index]), y[index])
        loss.backward()
        time.sleep(0.05)
        if ft.sync_gradients():
            opt.step()
            log.append({"step": ft.step, "world": world, "at": time.time()})
            if rank == 0:
                _mark_step(marker, ft.step)
        opt.zero_grad()
    digest = _sharded_digest(model)
    result = {"replica": replica_id, "rank": rank, "step": ft.step, "digest": digest,
              "healed_at": ft.healed_at, "log": log}
    ft.shutdown()
    with open(os.path.join(out_dir, f"hsdp.{replica_id}.{rank}.{os.getpid()}.json"), "w") as f:
        json.dump(result, f)
    return {"step": ft.step}


def train_on_platform(steps, out_dir, step_s=0.05, checkpoint_every=0):
    """One rank of a replica group of a job submitted with `hai submit --replicas R`: everything
    comes from the platform's environment (the group's RANK, WORLD_SIZE, MASTER_*; HAI_FT_STORE,
    HAI_REPLICA_GROUP, HAI_REPLICAS, HAI_MIN_REPLICAS); haiscale.fsdp shards the model inside
    the group. Logs the group's loss each committed step (the mean over its ranks). Trains
    `steps` steps, or fewer once the test writes a last step to out_dir/stop_at (the groups step
    together, so a step a few ahead of them is one they all stop at). With `checkpoint_every`,
    the quorum's first group checkpoints asynchronously to HAI_CHECKPOINT_DIR every that many
    steps, and every group resumes from the latest checkpoint when it starts."""
    import torch.distributed as dist

    from haiscale.fsdp import FullyShardedDataParallel

    dist.init_process_group("hfreduce")
    rank, world = dist.get_rank(), dist.get_world_size()
    name = os.environ["HAI_REPLICA_GROUP"]
    with open(os.path.join(out_dir, f"pid.{name}.{rank}"), "w") as f:
        f.write(str(os.getpid()))
    torch.manual_seed(1234)
    model = FullyShardedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(DIM, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    x, y = _data()
    ft = haiscale.ft.Manager(model, opt, batch_size=16, join_timeout=1.0, timeout=5.0,
                             quorum_timeout=120.0)
    saver, resumed_from = None, 0
    if checkpoint_every:
        directory = os.path.join(os.environ["HAI_CHECKPOINT_DIR"], f"g{rank}")  # shards by rank
        resumed_from, state = haiscale.checkpoint.load(directory)
        if state is not None:
            ft.load_state_dict(state)
        saver = haiscale.checkpoint.AsyncCheckpointer(directory)
    marker = os.path.join(out_dir, f"step.{name}")
    stop_at = os.path.join(out_dir, "stop_at")
    log = []
    while True:
        replicas = ft.start_step()
        if os.path.exists(stop_at):
            with open(stop_at) as f:
                steps = min(steps, int(f.read()))
        if ft.step >= steps:
            break
        index = torch.tensor([i % SAMPLES for i in list(ft.batch_indices())[rank::world]])
        loss = torch.nn.functional.mse_loss(model(x[index]), y[index])
        loss.backward()
        group_loss = loss.detach().clone()
        dist.all_reduce(group_loss)
        time.sleep(step_s)
        if ft.sync_gradients():
            opt.step()
            log.append({"step": ft.step, "world": replicas, "loss": group_loss.item() / world,
                        "at": time.time()})
            if saver and ft.quorum["replica_rank"] == 0 and ft.step % checkpoint_every == 0:
                saver.save(ft.step, ft.state_dict())
            if rank == 0:
                _mark_step(marker, ft.step)
        opt.zero_grad()
    digest = _sharded_digest(model)
    if saver:
        saver.close()
    result = {"group": name, "replica": os.environ["HAI_REPLICA_ID"], "rank": rank,
              "step": ft.step, "digest": digest, "healed_at": ft.healed_at, "log": log,
              "resumed_from": resumed_from, "run": int(os.environ["HAI_RUN"])}
    ft.shutdown()
    with open(os.path.join(out_dir, f"platform.{name}.{rank}.json"), "w") as f:
        json.dump(result, f)
    return {"step": ft.step}


def baseline_losses(steps, replicas, batch=16):
    """The loss per step of an uninterrupted run of `replicas` groups, computed in one process:
    every step averages the gradients of the next replicas x batch samples, which is one step
    on all of them."""
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(DIM, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    x, y = _data()
    losses = []
    for step in range(steps):
        index = torch.tensor([i % SAMPLES for i in range(step * replicas * batch,
                                                         (step + 1) * replicas * batch)])
        loss = torch.nn.functional.mse_loss(model(x[index]), y[index])
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses
