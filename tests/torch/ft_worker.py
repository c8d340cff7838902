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


def train(store, replica_id, steps, out_dir, step_s=0.05, replicas=3, min_replicas=2,
          quorum_timeout=60.0):
    torch.manual_seed(1234)  # the same initial model everywhere (a joiner takes the live state)
    model = torch.nn.Sequential(torch.nn.Linear(DIM, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    x, y = _data()
    ft = haiscale.ft.Manager(model, opt, batch_size=16, replica_id=replica_id, replicas=replicas,
                             min_replicas=min_replicas, store_address=store, job="ftjob",
                             join_timeout=1.0, timeout=5.0, quorum_timeout=quorum_timeout)
    log = []
    marker = os.path.join(out_dir, f"step.{replica_id}")
    while True:
        world = ft.start_step()
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
            with open(marker + ".tmp", "w") as f:
                f.write(str(ft.step))
            os.replace(marker + ".tmp", marker)
        opt.zero_grad()
    result = {"replica": replica_id, "step": ft.step, "samples": ft.samples, "log": log,
              "healed_at": ft.healed_at, "digest": _digest(ft)}
    ft.shutdown()
    with open(os.path.join(out_dir, f"result.{replica_id}.{os.getpid()}.json"), "w") as f:
        json.dump(result, f)
    return {"step": ft.step, "digest": result["digest"], "healed_at": ft.healed_at}
