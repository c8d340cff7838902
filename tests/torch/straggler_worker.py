"""One rank of a data-parallel job on HAI-Platform for the straggler tests (test_straggler.py):
haiscale DDP over hfreduce, real CPU work each step, batches from a torch DataLoader. Its code
does nothing for telemetry: haiscale records every step ($HAI_STEPS_FILE) by itself.

Faults come from outside (the test throttles a rank's CPU with a cgroup), or from files in
`out_dir` the test writes: `slow-data.<rank>` makes that rank's data loader take the seconds the
file holds per batch; `stop` ends the training at the next step.
"""

import os
import time

import torch
import torch.distributed as dist

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


def train(out_dir, extra_work=None, max_s=300):
    """Trains until out_dir/stop appears (or max_s). extra_work: {rank: n}: that rank does n more
    matrix products a step from the start (a heavier pipeline stage: uneven, but healthy)."""
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
    stop = os.path.join(out_dir, "stop")
    began, steps = time.monotonic(), 0
    while True:
        # Every rank stops at the same step: one that left early would fail the others' last
        # collective.
        done = torch.tensor([float(os.path.exists(stop) or time.monotonic() - began > max_s)])
        dist.all_reduce(done, op=dist.ReduceOp.MAX)
        if done.item():
            break
        x, y = next(loader)
        for _ in range(60 + extra):  # the step's compute: what a throttled CPU slows
            work = torch.tanh(work @ work) * 0.5
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        steps += 1
    dist.destroy_process_group()
    return {"rank": rank, "steps": steps}
