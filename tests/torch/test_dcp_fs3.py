"""haiscale.dcp: torch.distributed.checkpoint onto a real 3-replica fs3 (fs3-mgmtd, three
fs3-storage services, fs3-meta) through the native client. An FSDP2 model and its AdamW state
saved at 4 ranks loads at 2 and at 4, saved at 2 loads at 4, equal to the original bit for bit;
an async save blocks training for a small part of what a synchronous save takes; a checkpoint
whose `.metadata` never landed, or whose data is cut short, is refused on load."""

import os
import sys
import tempfile

import pytest
from launch import run

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
from fs3_cluster import Fs3Cluster  # noqa: E402


@pytest.fixture(scope="module")
def fs3():
    with tempfile.TemporaryDirectory() as d, Fs3Cluster(d) as cluster:
        yield cluster


def _env(fs3):
    return {"FS3_META": fs3.meta, "FS3_MGMTD": fs3.mgmtd}


def test_fsdp2_state_saved_at_one_world_size_loads_at_another_equal_to_the_original(fs3, tmp_path):
    env = _env(fs3)
    # 4 -> 2 and 4 through haiscale.checkpoint.save_dcp/load_dcp (latest, rotation); 2 -> 4
    # through dcp.save/dcp.load with haiscale.dcp's writer and reader.
    for saved_at, loads_at, via in ((4, (2, 4), "haiscale"), (2, (4,), "dcp")):
        path = f"/dcp/saved-at-{saved_at}"
        reference = str(tmp_path / f"reference-{saved_at}.pt")
        # (Its ranks report the checkpoint as a job's would: into a steps file.)
        run("dcp_worker:save", 1, saved_at, args=[path, reference, via],
            env=dict(env, HAI_STEPS_FILE=str(tmp_path / f"steps-{saved_at}.jsonl")))
        for world in loads_at:
            results = run("dcp_worker:load", 1, world, args=[path, reference, via], env=env)
            assert results[0] > 10, results  # rank 0 compared that many tensors and values


def test_an_async_save_blocks_for_a_small_part_of_a_synchronous_one(fs3):
    results = run("dcp_worker:async_blocking", 1, 2, args=["/dcp/async"], env=_env(fs3))
    for r in results:
        print(f"sync save {r['sync_s']:.3f} s, async save blocked {r['blocked_s']:.3f} s")
        assert r["blocked_s"] <= 0.2 * r["sync_s"], r


def test_an_incomplete_checkpoint_is_refused(fs3, tmp_path):
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    import fs3client
    from haiscale.dcp import Fs3StorageReader, Fs3StorageWriter

    with fs3client.FileSystem(fs3.meta, fs3.mgmtd) as fs:
        state = {"w": torch.arange(1000, dtype=torch.float32), "step": 7}
        dcp.save(state, storage_writer=Fs3StorageWriter("fs3:///dcp/single", fs=fs), no_dist=True)
        loaded = {"w": torch.zeros(1000), "step": 0}
        dcp.load(loaded, storage_reader=Fs3StorageReader("/dcp/single", fs=fs), no_dist=True)
        assert torch.equal(loaded["w"], state["w"]) and loaded["step"] == 7
        # Without its .metadata (a save that died before its end): nothing to load.
        fs.rename("/dcp/single/.metadata", "/dcp/single/.metadata.lost")
        with pytest.raises(CheckpointException, match="no entry '.metadata'"):
            dcp.load(loaded, storage_reader=Fs3StorageReader("/dcp/single", fs=fs), no_dist=True)
        fs.rename("/dcp/single/.metadata.lost", "/dcp/single/.metadata")
        # Its data cut short: the short read is an error, not zeros.
        data = [n for n in fs.listdir("/dcp/single") if n.endswith(".distcp")]
        assert data, fs.listdir("/dcp/single")
        fs.create(f"/dcp/single/{data[0]}")  # truncated to nothing
        with pytest.raises(CheckpointException, match="short read"):
            dcp.load(loaded, storage_reader=Fs3StorageReader("/dcp/single", fs=fs), no_dist=True)
