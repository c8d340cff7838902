#!/usr/bin/env python3
"""Goodput of training through lost replica groups: haiscale.ft against today's requeue from a
checkpoint and against torchft, in one run, same model, same harness.

    .venv/bin/pip install -r deploy/requirements-bench.txt      # torchft, the peer (PyPI)
    .venv/bin/python haiscale/bench/ft_bench.py                  # 3 groups, 60 s each, kill every 20
    .venv/bin/python haiscale/bench/ft_bench.py --seconds 30 --every 10

Every scenario trains haiscale.models.GPT on synthetic tokens with R replica groups (one process
each; a group is a replica of the model, as a node of a data-parallel job would be) for the same
wall time, and counts optimizer steps that count: committed and never lost.
  failure-free   haiscale.ft, nothing killed (the reference: 100%)
  requeue        one gang of R ranks over "hfreduce" (today's job): a checkpoint every
                 --checkpoint-every steps; a rank killed every --every steps ends the run, every
                 rank is started again (as hai-server's requeue does) and resumes from the
                 checkpoint: the steps since it are lost, plus the restart
  haiscale-ft    haiscale.ft over hfreduce-store's quorum: a group killed every --every steps, a
                 replacement started at once in its place (as the platform places one); the
                 others go on without it, it joins and takes a live group's state
  torchft        torchft 0.2 (Manager, DDP and Optimizer wrappers over ProcessGroupGloo, its
                 lighthouse), the same kills and replacements
"Every N steps": when the job's committed step reaches the next multiple of N, the next group in
turn is killed -9. --compute-ms of sleep per step stands for the accelerator's share of a step
(R processes share this machine's cores). Also printed: from a kill to the first step committed
without the lost group (recovery) and to the replacement's first committed step (rejoin), medians.

Last line:
  ft bench: goodput with a failure every N steps: haiscale-ft X% of failure-free, requeue Y%,
  torchft Z%; recovery Ts, rejoin Us
"""

import argparse
import datetime
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from ffdeploy.daemons import hfreduce_store  # (the project's venv has deploy/ on its path)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the workers (one process per group or rank) ---------------------------------------------

def _model_and_data(args):
    import torch

    from haiscale.models.gpt import GPT, GPTConfig

    torch.manual_seed(1)
    torch.set_num_threads(1)
    config = GPTConfig(d_model=args.dim, n_layers=args.layers, seq_len=64)
    model = GPT(config)

    def batch(indices):
        g = torch.Generator().manual_seed(int(indices[0]) * 7919 + 1)
        tokens = torch.randint(0, config.vocab_size, (len(indices), config.seq_len + 1), generator=g)
        return tokens[:, :-1], tokens[:, 1:]

    return model, batch


class Progress:
    """Appends "step time world" per committed step to the group's file (the controller reads it)."""

    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def commit(self, step, world):
        self.f.write(f"{step} {time.time():.3f} {world}\n")


def worker_haiscale(args):
    import torch

    import haiscale

    model, batch = _model_and_data(args)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ft = haiscale.ft.Manager(model, opt, batch_size=args.batch, replica_id=args.replica,
                             replicas=args.replicas, min_replicas=args.min_replicas,
                             store_address=args.store, job="ftbench", join_timeout=1.0,
                             heartbeat_timeout=args.heartbeat_timeout, timeout=5.0,
                             quorum_timeout=120.0)
    progress = Progress(args.progress)
    while True:
        world = ft.start_step()
        x, y = batch(list(ft.batch_indices()))
        model(x, y).backward()
        time.sleep(args.compute_ms / 1000)
        if ft.sync_gradients():
            opt.step()
            progress.commit(ft.step, world)
        opt.zero_grad()


def worker_torchft(args):
    import torch
    import torch.distributed as dist
    from torchft import Manager, Optimizer, ProcessGroupGloo

    model, batch = _model_and_data(args)
    inner = torch.optim.AdamW(model.parameters(), lr=1e-3)
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)  # noqa: F841

    def state_dict():
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    def load_state_dict(state):
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["optim"])

    manager = Manager(pg=ProcessGroupGloo(timeout=datetime.timedelta(seconds=5)),
                      min_replica_size=args.min_replicas, load_state_dict=load_state_dict,
                      state_dict=state_dict, replica_id=f"bench{args.replica}",
                      timeout=datetime.timedelta(seconds=5),
                      quorum_timeout=datetime.timedelta(seconds=120),
                      lighthouse_addr=args.store, store_addr="127.0.0.1", store_port=port,
                      rank=0, world_size=1)
    opt = Optimizer(manager, inner)
    params = [p for p in model.parameters() if p.requires_grad]
    progress = Progress(args.progress)
    while True:
        opt.zero_grad()  # starts the quorum
        step = manager.current_step()
        first = step * args.batch * args.replicas + int(args.replica) * args.batch
        x, y = batch(list(range(first, first + args.batch)))
        model(x, y).backward()
        time.sleep(args.compute_ms / 1000)
        # One flat allreduce, as haiscale.ft does (torchft 0.2's DDP wrapper asserts on a failed
        # allreduce's future under torch 2.13, so its Manager.allreduce is used directly).
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        manager.allreduce(flat).wait()  # errors are swallowed and reported by should_commit
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        opt.step()  # commits only when every participant can
        if manager.current_step() > step:
            progress.commit(manager.current_step(), manager.num_participants())


def worker_gang(args):
    import torch
    import torch.distributed as dist

    import haiscale  # noqa: F401
    from haiscale import checkpoint

    dist.init_process_group("hfreduce", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    model, batch = _model_and_data(args)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step, state = checkpoint.load(args.checkpoint_dir)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
    progress = Progress(args.progress)
    while True:
        first = step * args.batch * world + rank * args.batch
        x, y = batch(list(range(first, first + args.batch)))
        model(x, y).backward()
        time.sleep(args.compute_ms / 1000)
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        opt.zero_grad()
        step += 1
        if step % args.checkpoint_every == 0:
            checkpoint.save(args.checkpoint_dir, step,
                            {"model": model.state_dict(), "optim": opt.state_dict()})
        if rank == 0:
            progress.commit(step, world)


# ---- the controller ------------------------------------------------------------------------------

class Scenario:
    def __init__(self, args, name, work):
        self.args, self.name, self.work = args, name, work
        self.dir = tempfile.mkdtemp(prefix=f"ft-bench-{name}-")
        self.procs = {}
        self.kills = []     # (time, replica)
        self.starts = {}    # replica -> time of the latest (re)start

    def progress_path(self, replica):
        return os.path.join(self.dir, f"progress.{replica}")

    def start(self, replica, env=None, extra=()):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", self.work,
               "--replica", str(replica), "--progress", self.progress_path(replica)]
        cmd += self.args.forward + list(extra)
        e = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
                 HFREDUCE_NODE_ID=f"group{replica}", **(env or {}))
        self.procs[replica] = subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL,
                                               stderr=open(os.path.join(self.dir, f"err.{replica}"), "a"),
                                               start_new_session=True)
        self.starts[replica] = time.time()

    def kill(self, replica):
        p = self.procs.get(replica)
        if p is not None and p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        self.kills.append((time.time(), replica))

    def stop_all(self):
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def commits(self):
        """[(step, time, world, replica)] of every group's committed steps."""
        out = []
        for name in os.listdir(self.dir):
            if not name.startswith("progress."):
                continue
            replica = name.split(".", 1)[1]
            with open(os.path.join(self.dir, name)) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 3:
                        out.append((int(parts[0]), float(parts[1]), int(parts[2]), replica))
        return out

    def step(self):
        return max((c[0] for c in self.commits()), default=0)

    def current(self):
        """The step of the latest commit (after a requeue: counted again from the checkpoint)."""
        commits = self.commits()
        return max(commits, key=lambda c: c[1])[0] if commits else 0


def run_replicated(args, name, work, kill_every, env=None, extra=()):
    """Groups that survive each other's loss (haiscale-ft, torchft, or failure-free)."""
    s = Scenario(args, name, work)
    replicas = [str(i) for i in range(args.replicas)]
    for r in replicas:
        s.start(r, env, extra)
    begin = None
    next_kill = kill_every
    victim = 0
    try:
        while True:
            time.sleep(0.05)
            step = s.step()
            if begin is None:
                if step >= 1:
                    begin = time.time()  # timing starts at the first committed step
                    base = step
                continue
            if time.time() - begin >= args.seconds:
                break
            if kill_every and step - base >= next_kill:
                r = replicas[victim % len(replicas)]
                victim += 1
                next_kill += kill_every
                s.kill(r)
                s.start(r, env, extra)  # the replacement, in the lost group's place
            for r, p in s.procs.items():
                if p.poll() is not None and not any(k[1] == r for k in s.kills[-1:]):
                    raise RuntimeError(f"{name}: group {r} exited {p.returncode}; see {s.dir}/err.{r}")
    finally:
        s.stop_all()
    commits = [c for c in s.commits() if c[1] <= begin + args.seconds]
    steps = max((c[0] for c in commits), default=0) - base
    recovery, rejoin = [], []
    for at, victim in s.kills:
        after = [c for c in commits if c[1] > at and c[3] != victim]
        if after:
            recovery.append(min(c[1] for c in after) - at)
        back = [c for c in commits if c[1] > at and c[3] == victim]
        if back:
            rejoin.append(min(c[1] for c in back) - at)
    return {"steps": steps, "kills": len(s.kills), "recovery": recovery, "rejoin": rejoin,
            "dir": s.dir}


def run_requeue(args, kill_every):
    """One gang; a lost rank ends the run; every rank is started again from the checkpoint."""
    s = Scenario(args, "requeue", "gang")
    ckpt = os.path.join(s.dir, "checkpoints")
    os.makedirs(ckpt)
    world = args.replicas

    def launch():
        port = str(free_port())
        for r in range(world):
            s.start(str(r), env={"RANK": str(r), "WORLD_SIZE": str(world),
                                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                                 "LOCAL_RANK": "0"},
                    extra=["--checkpoint-dir", ckpt])

    launch()
    begin = None
    next_kill = kill_every
    victim = 0
    restarts = 0
    try:
        while True:
            time.sleep(0.05)
            current = s.current()
            if begin is None:
                if current >= 1:
                    begin, base = time.time(), current
                continue
            if time.time() - begin >= args.seconds:
                break
            if current - base >= next_kill and all(p.poll() is None for p in s.procs.values()):
                next_kill += kill_every
                s.kill(str(victim % world))
                victim += 1
            if any(p.poll() is not None for p in s.procs.values()):
                # The run ended (the killed rank, and the others failing): the requeue.
                deadline = time.time() + 30
                while time.time() < deadline and any(p.poll() is None for p in s.procs.values()):
                    time.sleep(0.05)
                s.stop_all()
                restarts += 1
                launch()
    finally:
        s.stop_all()
    # Steps that count at the end: the step the gang had reached (its progress since the last
    # checkpoint is kept while it runs); rank 0's log restarts from the checkpoint after a requeue.
    commits = [c for c in s.commits() if c[1] <= begin + args.seconds]
    final = max(commits, key=lambda c: c[1])[0] if commits else 0
    return {"steps": final - base, "kills": len(s.kills), "restarts": restarts, "dir": s.dir}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", choices=["haiscale", "torchft", "gang"])
    parser.add_argument("--replica", default="0")
    parser.add_argument("--progress")
    parser.add_argument("--store", help="hfreduce-store or torchft lighthouse address")
    parser.add_argument("--checkpoint-dir")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--min-replicas", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--compute-ms", type=float, default=150)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--heartbeat-timeout", type=float, default=0.5,
                        help="haiscale.ft: a group silent this long is not waited for")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--every", type=int, default=20, help="kill a group every N steps")
    parser.add_argument("--only", default="", help="comma list of scenarios to run")
    parser.add_argument("--build", default=os.environ.get("FF_BUILD_DIR", os.path.join(ROOT, "build")))
    args = parser.parse_args()
    if args.worker:
        {"haiscale": worker_haiscale, "torchft": worker_torchft, "gang": worker_gang}[args.worker](args)
        return
    args.forward = ["--replicas", str(args.replicas), "--min-replicas", str(args.min_replicas),
                    "--batch", str(args.batch), "--dim", str(args.dim), "--layers", str(args.layers),
                    "--compute-ms", str(args.compute_ms),
                    "--checkpoint-every", str(args.checkpoint_every),
                    "--heartbeat-timeout", str(args.heartbeat_timeout)]
    only = set(filter(None, args.only.split(",")))
    want = lambda name: not only or name in only  # noqa: E731

    store_daemon = hfreduce_store(os.path.join(args.build, "hfreduce"),
                                  tempfile.mkdtemp(prefix="ft-bench-store-")).start()
    store = store_daemon.rpc
    rows = {}
    try:
        def replicated(name, work, kill_every, address, job_prefix):
            return run_replicated(args, name, work, kill_every,
                                  extra=["--store", address] + job_prefix)

        if want("failure-free"):
            rows["failure-free"] = replicated("failure-free", "haiscale", 0, store, [])
        if want("requeue"):
            rows["requeue"] = run_requeue(args, args.every)
        if want("haiscale-ft"):
            rows["haiscale-ft"] = replicated("haiscale-ft", "haiscale", args.every, store, [])
        if want("torchft"):
            os.environ.setdefault("RUST_LOG", "warn")  # the lighthouse logs every quorum
            try:
                from torchft.coordination import LighthouseServer
            except ImportError:
                sys.exit("ft_bench: torchft is not installed: "
                         ".venv/bin/pip install -r deploy/requirements-bench.txt")
            lighthouse = LighthouseServer(bind="[::]:0", min_replicas=args.min_replicas,
                                          join_timeout_ms=1000)
            try:
                rows["torchft"] = replicated("torchft", "torchft", args.every,
                                             lighthouse.address(), [])
            finally:
                lighthouse.shutdown()
    finally:
        store_daemon.kill()

    ref = rows.get("failure-free", {}).get("steps") or 0
    print(f"{args.replicas} replica groups (min {args.min_replicas}), GPT d={args.dim} "
          f"L={args.layers}, batch {args.batch}/group, +{args.compute_ms:.0f} ms compute/step, "
          f"{args.seconds:.0f} s each; a group killed -9 every {args.every} steps")
    print(f"{'scenario':<14} {'steps':>6} {'steps/min':>10} {'% of free':>10} {'kills':>6} "
          f"{'recovery':>9} {'rejoin':>8}")
    def med(xs):
        return f"{statistics.median(xs):.2f}s" if xs else "-"
    pct = {}
    for name, r in rows.items():
        pct[name] = 100.0 * r["steps"] / ref if ref else float("nan")
        print(f"{name:<14} {r['steps']:>6} {r['steps'] * 60 / args.seconds:>10.1f} "
              f"{pct[name]:>9.0f}% {r['kills']:>6} {med(r.get('recovery', [])):>9} "
              f"{med(r.get('rejoin', [])):>8}")
    print("bounds: the failure-free rate is the groups' compute (+compute-ms) and one allreduce "
          "per step; a kill costs haiscale-ft the step in flight, HFReduce's 0.5 s wait for a "
          "cause or the quorum's wait for three missed heartbeats "
          f"({0.3 * args.heartbeat_timeout:.2f} s), whichever is longer, and re-forming; the replacement's start "
          "(python + torch import, on the cores the "
          "others train on here) comes before it rejoins, and every group re-forms and takes "
          "part in the heal when it does")
    ft = rows.get("haiscale-ft", {})
    print(f"ft bench: goodput with a failure every {args.every} steps: haiscale-ft "
          f"{pct.get('haiscale-ft', float('nan')):.0f}% of failure-free, requeue "
          f"{pct.get('requeue', float('nan')):.0f}%, torchft {pct.get('torchft', float('nan')):.0f}%; "
          f"recovery {med(ft.get('recovery', []))}, rejoin {med(ft.get('rejoin', []))}")


if __name__ == "__main__":
    main()
