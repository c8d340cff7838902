"""Ranks of test_dcp_fs3.py: an FSDP2 model and its AdamW state saved with DCP to fs3 through
haiscale.dcp at one world size and loaded at another (rank_runner.py runs them; FS3_META and
FS3_MGMTD name the fs3 the test started)."""

import json
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import fs3client
from haiscale import checkpoint
from haiscale.dcp import Fs3StorageReader, Fs3StorageWriter

FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def _model(width):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)])
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _trained(width, steps=3):
    """The sharded model and its optimizer after `steps` steps on this rank's data."""
    model = _model(width)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    torch.manual_seed(100 + dist.get_rank())
    for _ in range(steps):
        model(torch.randn(8, width)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def _flat(state, prefix=""):
    """name -> tensor (or value) of a nested full state dict."""
    out = {}
    for key, value in state.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, name + "."))
        else:
            out[name] = value
    return out


def save(path, reference, via="dcp", width=64):
    """Trains, saves the sharded state with DCP to fs3 at `path` (via "dcp": dcp.save with
    haiscale.dcp's writer; "haiscale": haiscale.checkpoint.save_dcp, steps 1 to 3 of which the
    last two stay), and (rank 0) the full state as `reference` on local disk, to compare with what
    is loaded elsewhere."""
    dist.init_process_group("hfreduce")
    model, opt = _trained(width)
    model_state, optim_state = get_state_dict(model, opt)
    state = {"model": model_state, "optim": optim_state}
    if via == "haiscale":
        for step in (1, 2, 3):
            checkpoint.save_dcp("fs3://" + path, step, state)
        if dist.get_rank() == 0:
            names = sorted(n for n in fs3client.FileSystem.from_env().listdir(path))
            assert names == ["latest", "step-00000002", "step-00000003"], names
    else:
        dcp.save(state, storage_writer=Fs3StorageWriter(path, step=5))
        if dist.get_rank() == 0:  # (run as a job, each rank would report this to the platform)
            lines = [json.loads(line) for line in open(os.environ["HAI_STEPS_FILE"])]
            reported = [r for r in lines if "ckpt_step" in r]
            assert reported and reported[-1]["ckpt_step"] == 5, lines
            assert reported[-1]["ckpt_bytes"] > 0 and reported[-1]["ckpt_write_s"] > 0, reported
    full_model, full_optim = get_state_dict(model, opt, options=FULL)
    if dist.get_rank() == 0:
        torch.save({"model": full_model, "optim": full_optim}, reference)
    dist.barrier()
    dist.destroy_process_group()
    return "saved"


def load(path, reference, via="dcp", width=64):
    """Loads `path` (as `save` wrote it `via`) into a fresh model and optimizer at this world
    size; rank 0 checks every tensor against `reference`, bit for bit."""
    dist.init_process_group("hfreduce")
    model = _model(width)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model_state, optim_state = get_state_dict(model, opt)
    state = {"model": model_state, "optim": optim_state}
    if via == "haiscale":
        assert checkpoint.load_dcp("fs3://" + path, state) == 3
    else:
        dcp.load(state, storage_reader=Fs3StorageReader(path))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    full_model, full_optim = get_state_dict(model, opt, options=FULL)
    checked = 0
    if dist.get_rank() == 0:
        expected = torch.load(reference, weights_only=False)
        got = _flat({"model": full_model, "optim": full_optim})
        want = _flat(expected)
        assert set(got) == set(want), sorted(set(got) ^ set(want))
        for name, value in want.items():
            if torch.is_tensor(value):
                assert torch.equal(got[name], value), name
            else:
                assert got[name] == value, (name, got[name], value)
            checked += 1
        assert checked > 10, checked
    dist.barrier()
    dist.destroy_process_group()
    return checked


def async_blocking(path, width=1024):
    """Seconds a synchronous dcp.save takes, and seconds dcp.async_save blocks training (the
    staging copy) before its write goes on behind; then waits for that write."""
    dist.init_process_group("hfreduce")
    model, opt = _trained(width, steps=1)
    model_state, optim_state = get_state_dict(model, opt)
    state = {"model": model_state, "optim": optim_state}
    dcp.save(state, storage_writer=Fs3StorageWriter(os.path.join(path, "warm")))
    # The least of three tries of each: on a loaded two-core machine one try can be held up
    # by anything else that runs, and that is not what the save costs.
    sync_s = blocked_s = float("inf")
    for attempt in range(3):
        dist.barrier()
        began = time.perf_counter()
        dcp.save(state, storage_writer=Fs3StorageWriter(os.path.join(path, f"sync-{attempt}")))
        sync_s = min(sync_s, time.perf_counter() - began)
        dist.barrier()
        began = time.perf_counter()
        future = dcp.async_save(state, storage_writer=Fs3StorageWriter(os.path.join(path, f"async-{attempt}")))
        blocked_s = min(blocked_s, time.perf_counter() - began)
        future.result()
    # haiscale.checkpoint's async save: done once written and named latest.
    done = checkpoint.save_dcp("fs3://" + os.path.join(path, "haiscale"), 9, state, async_save=True)
    assert done.result(timeout=120) == 9
    dist.barrier()
    assert checkpoint.load_dcp("fs3://" + os.path.join(path, "haiscale"), state) == 9
    dist.destroy_process_group()
    return {"sync_s": sync_s, "blocked_s": blocked_s}
