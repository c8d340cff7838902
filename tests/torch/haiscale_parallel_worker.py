"""HaiScale's FSDP, pipeline and tensor parallelism over "hfreduce", each rank against a model
trained in its own process by one process on the full batch.

Tolerances, per dtype: fp32 atol 2e-5, rtol 1e-4 (summation order only); bf16 compute
(FSDP mixed precision) atol 5e-3, rtol 5e-2 against the fp32 reference.
"""

import copy
import os
import time

import torch
import torch.distributed as dist

import haiscale  # noqa: F401
from haiscale import checkpoint
from haiscale.ddp import DistributedDataParallel
from haiscale.fsdp import FullyShardedDataParallel, MixedPrecision, ModuleTypePolicy, SizePolicy
from haiscale.models import GPT, GPTConfig
from haiscale.models.gpt import Block
from haiscale.pipeline import GPipe, Interleaved1F1B, PipeDream, make_subgroups, partition

STEPS = 3
FP32 = {"atol": 2e-5, "rtol": 1e-4}
BF16 = {"atol": 5e-3, "rtol": 5e-2}


def config(layers=3, tie=True):
    return GPTConfig(vocab_size=64, seq_len=8, d_model=32, n_heads=4, n_layers=layers, tie_embeddings=tie)


def gpt(c):
    torch.manual_seed(1234)
    return GPT(c)


def batches(size, steps=STEPS):
    g = torch.Generator().manual_seed(99)
    out = []
    for _ in range(steps):
        t = torch.randint(0, 64, (size, 9), generator=g)
        out.append((t[:, :-1], t[:, 1:]))
    return out


def sgd(params):
    return torch.optim.SGD(params, lr=0.2, momentum=0.9)


def reference(c, size, steps=STEPS):
    model = gpt(c)
    opt = sgd(model.parameters())
    for x, y in batches(size, steps):
        opt.zero_grad()
        model(x, y).backward()
        opt.step()
    return model


def compare_state(got, expected, what, tol=FP32):
    assert set(got) == set(expected), (what, sorted(set(got) ^ set(expected)))
    worst = 0.0
    for name, t in expected.items():
        g = got[name].detach().float()
        t = t.detach().float()
        if not torch.allclose(g, t, **tol):
            raise AssertionError(f"rank {dist.get_rank()}: {what}: {name} differs from single-process training "
                                 f"by {(g - t).abs().max().item()}")
        worst = max(worst, (g - t).abs().max().item())
    return worst


def local(t, rank, world):
    n = t.shape[0] // world
    return t[rank * n:(rank + 1) * n]


# ---- FSDP -----------------------------------------------------------------------------------------


def fsdp_equivalence(precision, policy_name, offload):
    dist.init_process_group("hfreduce")
    rank, world = dist.get_rank(), dist.get_world_size()
    c = config()
    policy = {"type": ModuleTypePolicy(Block), "size": SizePolicy(2000), "none": None}[policy_name]
    mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if precision == "bf16" else None
    model = FullyShardedDataParallel(gpt(c), auto_wrap_policy=policy, mixed_precision=mp, cpu_offload=offload)
    units = model.units()
    total = sum(p.numel() for p in gpt(c).parameters())
    # every parameter is in exactly one unit, and each rank holds a 1/world shard of it
    assert sum(n for _, n in units) == total, (units, total)
    assert sum(p.numel() for p in model.parameters()) == sum(-(-n // world) for _, n in units)
    if policy_name != "none":
        assert len(units) > 1, units
    opt = sgd(model.parameters())
    for x, y in batches(world * 2):
        opt.zero_grad()
        model(local(x, rank, world), local(y, rank, world)).backward()
        # after backward, every unit's gathered parameters are freed again
        assert all(u.flat.untyped_storage().size() == 0 for u in model._units), "unit left gathered"
        opt.step()
    worst = compare_state(model.full_state_dict(), reference(c, world * 2).state_dict(), "fsdp",
                          BF16 if precision == "bf16" else FP32)
    dist.destroy_process_group()
    return {"units": units, "worst": worst}


def trained_fsdp_with_adamw(c, rank, world):
    model = FullyShardedDataParallel(gpt(c), auto_wrap_policy=ModuleTypePolicy(Block))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for x, y in batches(world * 2):
        opt.zero_grad()
        model(local(x, rank, world), local(y, rank, world)).backward()
        opt.step()
    return model, opt


def fsdp_state_dicts():
    """Full and sharded state dicts, optimizer state, summon_full_params, and a bad state dict."""
    dist.init_process_group("hfreduce")
    rank, world = dist.get_rank(), dist.get_world_size()
    c = config()
    model, opt = trained_fsdp_with_adamw(c, rank, world)
    # the optimizer state is sharded: it is shaped like the shards
    for p in model.parameters():
        assert opt.state[p]["exp_avg"].shape == p.shape
    full = model.full_state_dict()
    assert set(full) == set(gpt(c).state_dict())  # the single-process names, tied ones included
    sharded = model.sharded_state_dict()
    osd_full = model.full_optim_state_dict(opt)
    osd_sharded = copy.deepcopy(opt.state_dict())  # as saved: not the live tensors

    # a fresh model loads the full state: identical parameters
    other = FullyShardedDataParallel(gpt(config()), auto_wrap_policy=ModuleTypePolicy(Block))
    torch.manual_seed(7)
    with torch.no_grad():
        for p in other.parameters():
            p.normal_()
    other.load_full_state_dict(full)
    for a, b in zip(other.parameters(), model.parameters()):
        assert torch.equal(a, b)
    other_opt = torch.optim.AdamW(other.parameters(), lr=1e-2)
    other.load_full_optim_state_dict(other_opt, osd_full)
    for a, b in zip(other.parameters(), model.parameters()):
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(other_opt.state[a][key], opt.state[b][key]), key
    # ... and the sharded one
    third = FullyShardedDataParallel(gpt(config()), auto_wrap_policy=ModuleTypePolicy(Block))
    third.load_sharded_state_dict(sharded)
    third_opt = torch.optim.AdamW(third.parameters(), lr=1e-2)
    third_opt.load_state_dict(osd_sharded)
    # the three continue identically
    for m, o in ((model, opt), (other, other_opt), (third, third_opt)):
        x, y = batches(world * 2, 1)[0]
        o.zero_grad()
        m(local(x, rank, world), local(y, rank, world)).backward()
        o.step()
    for a, b, d in zip(model.parameters(), other.parameters(), third.parameters()):
        assert torch.equal(a, b), ("full", (a - b).abs().max().item())
        assert torch.equal(a, d), ("sharded", (a - d).abs().max().item())

    # a state dict that does not match changes nothing
    bad = dict(full)
    bad["blocks.0.attn.qkv.weight"] = torch.zeros(3, 3)
    before = [p.clone() for p in other.parameters()]
    try:
        other.load_full_state_dict(bad)
        raise AssertionError("a mismatched state dict was accepted")
    except ValueError as e:
        assert "blocks.0.attn.qkv.weight" in str(e), e
    assert all(torch.equal(a, b) for a, b in zip(before, other.parameters()))

    # summon_full_params: the full tensors, and writeback into the shards
    with model.summon_full_params() as m:
        assert m.blocks[0].attn.qkv.weight.shape == (96, 32)
        m.blocks[0].attn.qkv.weight.fill_(0.5)
    assert torch.all(model.full_state_dict()["blocks.0.attn.qkv.weight"] == 0.5)
    dist.destroy_process_group()
    return "ok"


# ---- tensor parallel -------------------------------------------------------------------------------


def tp_equivalence(tie):
    dist.init_process_group("hfreduce")
    world = dist.get_world_size()
    c = config(tie=tie)
    model = gpt(c).parallelize(dist.group.WORLD)
    opt = sgd(model.parameters())
    losses = []
    for x, y in batches(4):
        opt.zero_grad()
        loss = model(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    ref = gpt(c)
    ref_opt = sgd(ref.parameters())
    ref_losses = []
    for x, y in batches(4):
        ref_opt.zero_grad()
        loss = ref(x, y)
        loss.backward()
        ref_opt.step()
        ref_losses.append(loss.item())
    assert all(abs(a - b) < 1e-5 for a, b in zip(losses, ref_losses)), (losses, ref_losses)
    # each rank's slices equal the same slices of the single-process model
    expected = ref.parallelize(dist.group.WORLD).state_dict()
    local_numel = sum(p.numel() for p in model.parameters())
    worst = compare_state(model.state_dict(), expected, "tp")
    dist.destroy_process_group()
    return {"worst": worst, "local_params": local_numel, "world": world}


# ---- pipelines and their composition -----------------------------------------------------------


def schedule_of(kind, stage, chunks, group, mode):
    cls = {"gpipe": GPipe, "1f1b": PipeDream, "interleaved": Interleaved1F1B}[kind]
    return cls(stage, chunks, process_group=group, checkpoint=mode)


def pipeline_equivalence(kind, mode, layers):
    dist.init_process_group("hfreduce")
    rank, world = dist.get_rank(), dist.get_world_size()
    c = config(layers=layers, tie=False)
    full = gpt(c)
    virtual = 2 if kind == "interleaved" else 1
    stage = partition(full.as_sequential(), rank, world, num_model_chunks=virtual)
    model = schedule_of(kind, stage, 4, None, mode)
    opt = sgd(model.parameters())
    losses = []
    for x, y in batches(8):
        opt.zero_grad()
        loss, _ = model.forward_backward(x, criterion=full.criterion, labels=(y,))
        opt.step()
        losses.append(None if loss is None else loss.item())
    ref = reference(c, 8)
    ref_stage = partition(ref.as_sequential(), rank, world, num_model_chunks=virtual)
    ref_stage = ref_stage if virtual > 1 else [ref_stage]
    got = model.chunks_modules
    worst = 0.0
    for a, b in zip(got, ref_stage):
        worst = max(worst, compare_state(a.state_dict(), b.state_dict(), f"{kind} stage {rank}"))
    dist.destroy_process_group()
    return {"losses": losses, "worst": worst}


def dp_pp_tp(dp, pp, tp, kind):
    """DP x PP x TP: haiscale DDP over the data group around each pipeline chunk, tensor-parallel
    blocks, a pipeline schedule; every rank's parameters equal the corresponding slice of the
    single-process model trained on the whole batch."""
    dist.init_process_group("hfreduce")
    groups = make_subgroups(pp_size=pp, tp_size=tp, dp_size=dp)
    dp_rank, pp_rank = dist.get_rank(groups.dp), dist.get_rank(groups.pp)
    c = config(layers=4, tie=False)
    full = gpt(c).parallelize(groups.tp)
    virtual = 2 if kind == "interleaved" else 1
    part = partition(full.as_sequential(), pp_rank, pp, num_model_chunks=virtual)
    chunks = [DistributedDataParallel(m, process_group=groups.dp, bucket_cap_mb=0.01)
              for m in (part if virtual > 1 else [part])]
    model = schedule_of(kind, chunks if virtual > 1 else chunks[0], 4, groups.pp, "never")
    opt = sgd(model.parameters())
    per = 8 // dp
    for x, y in batches(8):
        opt.zero_grad()
        model.forward_backward(x[dp_rank * per:(dp_rank + 1) * per], criterion=full.criterion,
                               labels=(y[dp_rank * per:(dp_rank + 1) * per],))
        opt.step()
    ref = reference(c, 8).parallelize(groups.tp)
    ref_part = partition(ref.as_sequential(), pp_rank, pp, num_model_chunks=virtual)
    worst = 0.0
    for a, b in zip(chunks, ref_part if virtual > 1 else [ref_part]):
        worst = max(worst, compare_state(a.module.state_dict(), b.state_dict(), "dp x pp x tp"))
    dist.destroy_process_group()
    return {"worst": worst}


# ---- failures ---------------------------------------------------------------------------------------


def raising_mid_step(kind, raise_rank):
    """Trains; rank `raise_rank` raises in its third step. The others must raise, not hang."""
    dist.init_process_group("hfreduce")
    rank, world = dist.get_rank(), dist.get_world_size()
    c = config(layers=4, tie=kind != "pipeline")
    if kind == "fsdp":
        model = FullyShardedDataParallel(gpt(c), auto_wrap_policy=ModuleTypePolicy(Block))
    elif kind == "tp":
        model = gpt(c).parallelize(dist.group.WORLD)
    else:
        full = gpt(c)
        model = PipeDream(partition(full.as_sequential(), rank, world), 4)
    opt = sgd(model.parameters())
    try:
        for step, (x, y) in enumerate(batches(world * 2, 1000)):
            if rank == raise_rank and step == 2:
                raise ValueError(f"a bug in rank {rank}'s step")
            opt.zero_grad()
            if kind == "pipeline":
                model.forward_backward(x, criterion=full.criterion, labels=(y,))
            elif kind == "fsdp":
                model(local(x, rank, world), local(y, rank, world)).backward()
            else:
                model(x, y).backward()
            opt.step()
    except RuntimeError as e:
        return {"error": str(e), "at": time.time()}
    return {"error": None}


# ---- checkpoints ------------------------------------------------------------------------------------


def checkpoint_round_trip(directory):
    """FSDP sharded and full checkpoints: what is loaded equals what was saved, bit for bit; older
    ones rotate out; a save that fails on one rank commits nothing (the test then checks that a
    sharded checkpoint refuses another world size)."""
    dist.init_process_group("hfreduce")
    rank, world = dist.get_rank(), dist.get_world_size()
    c = config()
    model, opt = trained_fsdp_with_adamw(c, rank, world)
    sharded_dir, full_dir = os.path.join(directory, "sharded"), os.path.join(directory, "full")
    checkpoint.save(sharded_dir, 3, {"model": model.sharded_state_dict(), "opt": opt.state_dict()}, sharded=True)
    checkpoint.save(full_dir, 3, {"model": model.full_state_dict(), "opt": model.full_optim_state_dict(opt)})
    # later saves rotate the old ones out (keep=2)
    for step in (4, 5):
        checkpoint.save(sharded_dir, step, {"model": model.sharded_state_dict(), "opt": opt.state_dict()},
                        sharded=True)
    assert checkpoint.list_checkpoints(sharded_dir) == [4, 5], checkpoint.list_checkpoints(sharded_dir)

    # a save that fails on one rank: every rank raises, latest still names step 5
    real_save = torch.save
    if rank == world - 1:
        def failing(obj, f, *a, **k):
            raise OSError(28, "No space left on device")
        torch.save = failing
    try:
        checkpoint.save(sharded_dir, 6, {"model": model.sharded_state_dict()}, sharded=True)
        raise AssertionError("a failed save did not raise")
    except RuntimeError as e:
        assert "failed on at least one rank" in str(e), e
    finally:
        torch.save = real_save
    assert checkpoint.latest_step(sharded_dir) == 5
    assert checkpoint.list_checkpoints(sharded_dir) == [4, 5]

    step, state = checkpoint.load(sharded_dir)
    fresh = FullyShardedDataParallel(gpt(config()), auto_wrap_policy=ModuleTypePolicy(Block))
    fresh.load_sharded_state_dict(state["model"])
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    fresh_opt.load_state_dict(state["opt"])
    assert step == 5
    for a, b in zip(fresh.parameters(), model.parameters()):
        assert torch.equal(a, b)
    step, state = checkpoint.load(full_dir)
    assert step == 3
    full = model.full_state_dict()
    assert all(torch.equal(state["model"][k], full[k]) for k in full)
    dist.destroy_process_group()
    return "ok"
