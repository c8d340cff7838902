"""torch's stock DDP comm hooks (torch.distributed.algorithms.ddp_comm_hooks) over "hfreduce",
each against the same hook over gloo (not bf16_compress_hook, which torch refuses without CUDA and
NCCL, nor batched_powerSGD_hook, which fails in torch 2.13 itself on CPU whatever the backend: its
_orthogonalize asserts on the 2-D matrix the hook passes it, gloo included): one model trained twice from the same start on the same
batches, once with DDP over each backend; the parameters must agree within the hook's own
tolerance (the reductions sum in different orders; fp16/bf16 compression rounds)."""

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as default
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel as DDP

import haiscale  # noqa: F401  (registers "hfreduce")


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 8))


def hooks():
    def powersgd_state(group):
        return powersgd.PowerSGDState(process_group=group, matrix_approximation_rank=2,
                                      start_powerSGD_iter=2, min_compression_rate=0.5,
                                      use_error_feedback=True, warm_start=True, random_seed=0)
    return {
        "allreduce": (lambda g: g, default.allreduce_hook, 1e-5),
        "fp16_compress": (lambda g: g, default.fp16_compress_hook, 2e-3),
        "powerSGD": (powersgd_state, powersgd.powerSGD_hook, 1e-4),
    }


def train(group, state_of, hook, steps=6):
    m = DDP(model(), process_group=group)
    m.register_comm_hook(state_of(group), hook)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + dist.get_rank())
    for _ in range(steps):
        x = torch.randn(16, 32, generator=gen)
        y = torch.randn(16, 8, generator=gen)
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in m.parameters()]


def compare_hooks():
    dist.init_process_group("hfreduce")
    gloo = dist.new_group(backend="gloo")
    hf = dist.distributed_c10d._get_default_group()
    start = [p.detach().clone() for p in model().parameters()]
    out = {}
    for name, (state_of, hook, tol) in hooks().items():
        got = train(hf, state_of, hook)
        want = train(gloo, state_of, hook)
        worst = max((g - w).abs().max().item() for g, w in zip(got, want))
        moved = max((g - s).abs().max().item() for g, s in zip(got, start))
        out[name] = {"worst": worst, "tolerance": tol, "moved": moved}
    dist.barrier()
    dist.destroy_process_group()
    return out
