"""torch's stock DDP comm hooks (torch.distributed.algorithms.ddp_comm_hooks) over "hfreduce",
each against the same hook over gloo, with torch's DDP and with haiscale.ddp: one model trained
twice from the same start on the same batches, once over each backend; the parameters must agree
within the hook's own tolerance (the reductions sum in different orders; fp16/bf16 compression
rounds).

bf16_compress_hook: torch's DDP refuses it by name without CUDA and NCCL, so over torch's DDP it
runs under another name (the hook's code unchanged); haiscale.ddp takes it as it is.
batched_powerSGD_hook is not here: it fails in torch 2.13 itself on CPU whatever the backend (its
_orthogonalize asserts on the 2-D matrix the hook passes it, gloo included)."""

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as default
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel as DDP

import haiscale  # noqa: F401  (registers "hfreduce")
from haiscale.ddp import DistributedDataParallel as HaiDDP


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 8))


def hooks():
    def powersgd_state(group):
        return powersgd.PowerSGDState(process_group=group, matrix_approximation_rank=2,
                                      start_powerSGD_iter=2, min_compression_rate=0.5,
                                      use_error_feedback=True, warm_start=True, random_seed=0)
    def bf16_hook(state, bucket):  # torch's DDP checks the name bf16_compress_hook, not the code
        return default.bf16_compress_hook(state, bucket)
    return {
        "allreduce": (lambda g: g, default.allreduce_hook, 1e-5),
        "fp16_compress": (lambda g: g, default.fp16_compress_hook, 2e-4),
        "bf16_compress": (lambda g: g, bf16_hook, 1e-3),
        "powerSGD": (powersgd_state, powersgd.powerSGD_hook, 1e-4),
    }


def counted(hook, calls):
    def run(state, bucket):
        calls.append(bucket.index())
        return hook(state, bucket)
    return run


def train(group, state_of, hook, steps=6, ddp="torch", calls=None):
    if ddp == "torch":
        m = DDP(model(), process_group=group)
    else:  # several buckets, so that index() and is_last() matter (PowerSGD counts steps by them)
        m = HaiDDP(model(), process_group=group, bucket_cap_mb=4096 / 2**20, first_bucket_mb=1024 / 2**20)
    if hook is not None:
        m.register_comm_hook(state_of(group), hook if calls is None else counted(hook, calls))
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
    for ddp in ("torch", "haiscale"):
        for name, (state_of, hook, tol) in hooks().items():
            calls = []
            got = train(hf, state_of, hook, ddp=ddp, calls=calls)
            want = train(gloo, state_of, hook, ddp=ddp)
            worst = max((g - w).abs().max().item() for g, w in zip(got, want))
            moved = max((g - s).abs().max().item() for g, s in zip(got, start))
            out[f"{ddp}.{name}"] = {"worst": worst, "tolerance": tol, "moved": moved,
                                    "hook_calls": len(calls), "buckets": len(set(calls))}
    # haiscale.ddp's own reduction (AVG in one allreduce per bucket) and the stock allreduce hook
    # (divide, then SUM) are the same arithmetic up to rounding.
    plain = train(hf, None, None, ddp="haiscale")
    hooked = train(hf, lambda g: g, default.allreduce_hook, ddp="haiscale")
    out["haiscale.allreduce_vs_builtin"] = {
        "worst": max((a - b).abs().max().item() for a, b in zip(plain, hooked)), "tolerance": 1e-5,
        "moved": max((g - s).abs().max().item() for g, s in zip(plain, start)), "hook_calls": 1, "buckets": 1}
    dist.barrier()
    dist.destroy_process_group()
    return out


def hook_misuse():
    """haiscale.ddp.register_comm_hook's errors: each names the problem, and the module still
    trains afterwards."""
    dist.init_process_group("hfreduce")
    errors = {}

    def expect(name, exc, fn):
        try:
            fn()
        except exc as e:
            errors[name] = str(e)
        else:
            errors[name] = None

    def step(m):
        m.zero_grad()
        m(torch.ones(4, 32)).sum().backward()

    m = HaiDDP(model())
    expect("not_callable", TypeError, lambda: m.register_comm_hook(None, 42))
    m.register_comm_hook(None, default.allreduce_hook)
    expect("twice", RuntimeError, lambda: m.register_comm_hook(None, default.allreduce_hook))
    step(m)
    expect("bf16_and_hook", ValueError,
           lambda: HaiDDP(model(), gradient_dtype=torch.bfloat16).register_comm_hook(None, default.allreduce_hook))
    late = HaiDDP(model())
    step(late)
    expect("after_backward", RuntimeError, lambda: late.register_comm_hook(None, default.allreduce_hook))

    def not_a_future(state, bucket):
        dist.all_reduce(bucket.buffer())
        return bucket.buffer()
    bad = HaiDDP(model())
    bad.register_comm_hook(None, not_a_future)
    expect("returns_tensor", TypeError, lambda: step(bad))

    def wrong_size(state, bucket):
        return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: torch.zeros(3))
    bad = HaiDDP(model())
    bad.register_comm_hook(None, wrong_size)
    expect("wrong_size", RuntimeError, lambda: step(bad))
    step(m)  # the good one still works
    grads = [p.grad.clone() for p in m.parameters()]
    dist.barrier()
    dist.destroy_process_group()
    return {"errors": errors, "grad_norm": sum(g.norm().item() for g in grads)}
