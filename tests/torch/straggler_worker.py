"""One rank of a data-parallel job on HAI-Platform for the straggler tests (test_straggler.py):
haiscale DDP over hfreduce, real CPU work each step, batches from a torch DataLoader. Its code
does nothing for telemetry: haiscale records every step ($HAI_STEPS_FILE) by itself.

Faults come from outside (the test throttles a rank's CPU with a cgroup), or from files in
`out_dir` the test writes. It takes part in the suspend protocol (hai_job), every rank leaving at
the same step. Files: `slow-data.<rank>` makes that rank's data loader take the seconds the
file holds per batch; `stop` ends the training at the next step.
"""

import os
import time

import torch
import torch.distributed as dist

import hai_job
from haiscale.ddp import DistributedDataParallel

DIM = 256


class _Batches(torch.utils.data.Dataset):
    def __init__(self, out_dir, rank):
        self.slow = os.path.join(out_dir, f"slow-data.{rank}")

    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        try:
            with open(self.slow) as f:
                time.sleep(float(f.read() or 0))
        except (OSError, ValueError):
            pass
        g = torch.Generator().manual_seed(i)
        return torch.randn(DIM, generator=g), torch.randn(1, generator=g)


def _fs3_reader(fs3):
    """fs3: {"meta", "mgmtd", "path", "ranges"}: a function reading `ranges` 128 KiB ranges of the
    file, one from each of its first chunks (1 MiB each: every target it is striped over), with
    fs3's native client in one batch."""
    if not fs3:
        return None
    from fs3client import FileSystem

    fs = FileSystem(fs3["meta"], fs3["mgmtd"])
    f = fs.open(fs3["path"])
    bufs = [bytearray(128 << 10) for _ in range(fs3["ranges"])]

    def read():
        with hai_job.phase("data"):
            got = fs.read_batch([(f, i << 20, b) for i, b in enumerate(bufs)])
        assert all(n == len(b) for n, b in zip(got, bufs)), got
    return read


def train(out_dir, extra_work=None, max_s=300, steps=0, telemetry=True, comm_mb=0, fs3=None):
    """Trains until out_dir/stop appears (or max_s, or `steps` steps when > 0). extra_work:
    {rank: n}: that rank does n more matrix products a step from the start (a heavier pipeline
    stage: uneven, but healthy). telemetry=False: steps are not recorded (the bench's "off");
    "alternate": recording goes off and on every 50 steps, at the same step on every rank, and
    the result has each block's mean step time by mode, the first (warm-up) block left out (the
    bench's same-run overhead).
    comm_mb: one more allreduce of that many MiB a step (a bigger model's gradients: traffic
    between the nodes). fs3: each step also reads from fs3 (_fs3_reader), as data loading.
    Returns the steps done and the mean step time after the first 20."""
    if not telemetry:
        os.environ.pop("HAI_STEPS_FILE", None)
    hai_job.install_suspend_handler()
    dist.init_process_group("hfreduce")
    rank = dist.get_rank()
    with open(os.path.join(out_dir, f"pid.{rank}"), "w") as f:
        f.write(str(os.getpid()))
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(DIM, DIM), torch.nn.Tanh(), torch.nn.Linear(DIM, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = iter(torch.utils.data.DataLoader(_Batches(out_dir, rank), batch_size=8))
    work = torch.randn(256, 256)
    extra = int((extra_work or {}).get(str(rank), 0))
    payload = torch.zeros(int(comm_mb * (1 << 20)) // 4)
    read_fs3 = _fs3_reader(fs3)
    stop = os.path.join(out_dir, "stop")
    began, done_steps, times = time.monotonic(), 0, []
    blocks = {"on": [], "off": []}
    while True:
        if telemetry == "alternate" and done_steps % 50 == 0 and done_steps > 0:
            # The block that ended (its first step, after the switch, left out; the first block,
            # the job's warm-up, not counted).
            block = times[-49:]
            if done_steps > 50:
                blocks["on" if (done_steps // 50) % 2 == 1 else "off"].append(
                    (block[-1] - block[0]) / (len(block) - 1))
            if (done_steps // 50) % 2 == 1:
                hai_job._stop_recording()
            else:
                from haiscale import _backend

                _backend._record_steps()
        # Every rank stops at the same step: one that left early would fail the others' last
        # collective.
        done = torch.tensor([float(os.path.exists(stop) or time.monotonic() - began > max_s
                                   or 0 < steps <= done_steps), float(hai_job.should_suspend())])
        dist.all_reduce(done, op=dist.ReduceOp.MAX)
        if done[1]:  # asked to make room (no state worth a checkpoint): leave, to be requeued
            dist.destroy_process_group()
            hai_job.suspend_now()
        if done[0]:
            break
        x, y = next(loader)
        if read_fs3:
            read_fs3()
        for _ in range(60 + extra):  # the step's compute: what a throttled CPU slows
            work = torch.tanh(work @ work) * 0.5
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if payload.numel():
            dist.all_reduce(payload)
        opt.step()
        opt.zero_grad()
        done_steps += 1
        times.append(time.perf_counter())
    dist.destroy_process_group()
    timed = times[20:]
    mean = (timed[-1] - timed[0]) / (len(timed) - 1) if len(timed) > 1 else 0.0
    return {"rank": rank, "steps": done_steps, "step_s": mean, "blocks": blocks}


def train_pipeline(out_dir, max_s=300):
    """A 2-stage 1F1B pipeline (haiscale.pipeline.PipeDream, one stage a rank) whose second stage
    costs about three times the first, until out_dir/stop appears: an uneven job by design, whose
    first stage always waits for the second."""
    from haiscale.pipeline import PipeDream

    dist.init_process_group("hfreduce")
    rank = dist.get_rank()
    with open(os.path.join(out_dir, f"pid.{rank}"), "w") as f:
        f.write(str(os.getpid()))
    torch.manual_seed(rank)
    layers = [torch.nn.Sequential(torch.nn.Linear(DIM, DIM), torch.nn.Tanh())
              for _ in range(8 if rank == 0 else 24)]
    if rank == 1:
        layers.append(torch.nn.Linear(DIM, 1))
    model = PipeDream(torch.nn.Sequential(*layers), chunks=4)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = iter(torch.utils.data.DataLoader(_Batches(out_dir, rank), batch_size=32))
    stop = os.path.join(out_dir, "stop")
    began, done_steps = time.monotonic(), 0
    while True:
        done = torch.tensor([float(os.path.exists(stop) or time.monotonic() - began > max_s)])
        dist.all_reduce(done, op=dist.ReduceOp.MAX)
        if done.item():
            break
        x, y = next(loader)
        model.forward_backward(x, criterion=torch.nn.functional.mse_loss, labels=(y,))
        opt.step()
        opt.zero_grad()
        done_steps += 1
    dist.destroy_process_group()
    return {"rank": rank, "steps": done_steps}


def train_ft(out_dir, steps=1000000):
    """One replica group (one process) of a fault-tolerant job (`hai submit --replicas R`,
    haiscale.ft): the same compute a step as train(), gradients averaged over the quorum's groups.
    Its code does nothing for telemetry. Writes its pid to out_dir/pid.<group> and its last
    committed step to out_dir/step.<group>; stops at the step out_dir/stop_at names."""
    import haiscale.ft

    dist.init_process_group("hfreduce")  # the group's own ranks: steps are recorded from here
    name = os.environ["HAI_REPLICA_GROUP"]
    with open(os.path.join(out_dir, f"pid.{name}"), "w") as f:
        f.write(str(os.getpid()))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(DIM, DIM), torch.nn.Tanh(), torch.nn.Linear(DIM, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ft = haiscale.ft.Manager(model, opt, batch_size=8, join_timeout=1.0, timeout=5.0,
                             quorum_timeout=120.0)
    work = torch.randn(256, 256)
    stop_at = os.path.join(out_dir, "stop_at")
    while True:
        ft.start_step()
        if os.path.exists(stop_at):
            with open(stop_at) as f:
                steps = min(steps, int(f.read() or steps))
        if ft.step >= steps:
            break
        for _ in range(60):  # the step's compute: what a throttled CPU slows
            work = torch.tanh(work @ work) * 0.5
        g = torch.Generator().manual_seed(ft.step)
        x, y = torch.randn(8, DIM, generator=g), torch.randn(8, 1, generator=g)
        torch.nn.functional.mse_loss(model(x), y).backward()
        if ft.sync_gradients():
            opt.step()
            tmp = os.path.join(out_dir, f".step.{name}")
            with open(tmp, "w") as f:
                f.write(str(ft.step))
            os.replace(tmp, os.path.join(out_dir, f"step.{name}"))
        opt.zero_grad()
    ft.shutdown()
    dist.destroy_process_group()
    return {"step": ft.step}
