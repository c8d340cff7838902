"""HaiScale's FSDP (ZeRO-3), tensor parallelism, pipelines (GPipe, 1F1B, interleaved 1F1B) and
their composition DP x PP x TP, on 2-8 ranks as processes over "hfreduce": every rank ends with
the parameters (or its slice of them) of one process trained on the whole batch (fp32: atol 2e-5,
rtol 1e-4; bf16 compute: atol 5e-3, rtol 5e-2). A rank raising mid-step makes the others raise."""

import pytest
from launch import Ranks, run


@pytest.mark.parametrize("precision,policy,offload", [
    ("fp32", "type", False),
    ("fp32", "size", False),
    ("fp32", "none", True),
    ("bf16", "type", False),
])
def test_fsdp_matches_single_process_training(precision, policy, offload):
    results = run("haiscale_parallel_worker:fsdp_equivalence", 2, 2, args=[precision, policy, offload])
    assert all(r["units"] == results[0]["units"] for r in results)


def test_fsdp_state_dicts_optimizer_state_and_summon_full_params():
    run("haiscale_parallel_worker:fsdp_state_dicts", 2, 2)


@pytest.mark.parametrize("tie", [True, False])
def test_tensor_parallel_gpt_matches_single_process_training(tie):
    results = run("haiscale_parallel_worker:tp_equivalence", 1, 2, args=[tie])
    # each rank holds about half of the weights (LayerNorms and positions are replicated)
    assert results[0]["local_params"] == results[1]["local_params"]


def test_tensor_parallel_over_four_ranks_on_two_nodes():
    run("haiscale_parallel_worker:tp_equivalence", 2, 2, args=[True])


@pytest.mark.parametrize("kind,mode,layers,nodes,per_node", [
    ("gpipe", "never", 3, 1, 2),
    ("1f1b", "never", 3, 2, 2),
    ("1f1b", "except_last", 3, 2, 2),
    ("gpipe", "always", 3, 2, 1),
    ("interleaved", "never", 6, 1, 2),
    ("interleaved", "always", 6, 2, 2),
])
def test_pipeline_schedules_match_single_process_training(kind, mode, layers, nodes, per_node):
    results = run("haiscale_parallel_worker:pipeline_equivalence", nodes, per_node, args=[kind, mode, layers])
    nodes * per_node
    # the loss is reported on the last stage only
    assert all(r["losses"][0] is None for r in results[:-1]) and results[-1]["losses"][0] > 0


@pytest.mark.parametrize("dp,pp,tp,kind", [(2, 2, 2, "1f1b"), (2, 2, 2, "interleaved"), (2, 2, 1, "gpipe")])
def test_dp_pp_tp_composed_matches_single_process_training(dp, pp, tp, kind):
    run("haiscale_parallel_worker:dp_pp_tp", 2, (dp * pp * tp) // 2, args=[dp, pp, tp, kind], timeout=300)


@pytest.mark.parametrize("kind,raise_rank", [("fsdp", 2), ("pipeline", 1), ("tp", 0)])
def test_a_rank_raising_mid_step_makes_the_others_raise(kind, raise_rank):
    outcomes = Ranks("haiscale_parallel_worker:raising_mid_step", 2, 2 if kind != "tp" else 1,
                     args=[kind, raise_rank]).wait(timeout=120)
    assert outcomes[raise_rank].returncode == 1 and f"a bug in rank {raise_rank}" in outcomes[raise_rank].output
    for o in outcomes:
        if o.rank != raise_rank:
            assert o.ok and o.result["error"], o.output[-3000:]
            assert "hfreduce" in o.result["error"], o.result
