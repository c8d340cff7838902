"""haiscale.ddp.DistributedDataParallel: our own reducer (flat buckets, gradients as bucket views,
allreduce as each bucket fills) trains to single-process parameters (fp32: atol 2e-5, rtol
1e-4; bf16 communication: atol 2e-3, rtol 2e-2)."""

import pytest
from launch import run


@pytest.mark.parametrize("gradient_dtype", ["none", "bf16"])
def test_haiscale_ddp_matches_single_process_training(gradient_dtype):
    run("haiscale_ddp_worker:equivalence", 2, 2, args=[gradient_dtype])


def test_no_sync_accumulates_locally_and_the_next_step_reduces_the_sum():
    run("haiscale_ddp_worker:no_sync_accumulates", 2, 1)


def test_unused_parameters_are_reduced_as_zero_when_allowed():
    for r in run("haiscale_ddp_worker:unused_parameters", 1, 2, args=[True]):
        assert r["error"] is None, r
        assert r["grads"]["unused.weight"] == 0 and r["grads"]["used.weight"] > 0, r


def test_unused_parameters_without_the_flag_raise_naming_them():
    for r in run("haiscale_ddp_worker:unused_parameters", 1, 2, args=[False]):
        assert r["error"] and "unused.weight" in r["error"] and "find_unused_parameters" in r["error"], r
