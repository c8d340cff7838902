"""Stock DDP, FSDP2, a 2-D DeviceMesh with DTensor, and torch.distributed.pipelining (GPipe and
1F1B) over "hfreduce" train to the parameters of single-process training on the full batch
(fp32; atol 2e-5, rtol 1e-4: summation order only)."""

import pytest
from launch import run


@pytest.mark.parametrize("nodes,per_node", [(2, 2)], ids=["2x2"])
def test_ddp_matches_single_process_training(nodes, per_node):
    run("training_worker:ddp", nodes, per_node)


def test_fsdp2_fully_shard_matches_single_process_training():
    run("training_worker:fsdp2", 2, 2)


def test_device_mesh_data_x_tensor_parallel_matches_single_process_training():
    run("training_worker:dp_tp", 2, 2)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipelining_schedule_matches_single_process_training(schedule):
    run("training_worker:pipeline", 2, 1, args=[schedule])
