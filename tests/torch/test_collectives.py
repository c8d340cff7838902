"""Every op x type over "hfreduce" on 1x2, 2x1, 2x2 and 3x2 (nodes x ranks per node)."""

import pytest
from launch import run

LAYOUTS = [(1, 2), (2, 1), (2, 2), (3, 2)]


@pytest.mark.parametrize("nodes,per_node", LAYOUTS, ids=[f"{n}x{p}" for n, p in LAYOUTS])
def test_every_op_and_type_gives_the_exact_result(nodes, per_node):
    results = run("collectives_worker:check_everything", nodes, per_node, timeout=300)
    failures = [f for r in results for f in r["failures"]]
    assert not failures, "\n".join(failures[:40])
    # The checks ran (a worker that skipped them would report nothing wrong).
    assert all(r["checked"] > 250 for r in results), [r["checked"] for r in results]
    expected_transport = "shm" if nodes == 1 else "tcp"
    assert all(r["info"] == {"nodes": nodes, "transport": expected_transport} for r in results), results


@pytest.mark.parametrize("nodes,per_node", [(1, 2), (2, 2)], ids=["1x2", "2x2"])
def test_torch_distributed_debug_detail_works(nodes, per_node):
    results = run("collectives_worker:debug_detail", nodes, per_node,
                  env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, timeout=180)
    failures = [f for r in results for f in r["failures"]]
    assert not failures, "\n".join(failures)
    assert len({r["sequence"] for r in results}) == 1, results


@pytest.mark.parametrize("nodes,per_node", [(1, 2), (2, 1), (2, 2)], ids=["1x2", "2x1", "2x2"])
def test_ddp_comm_hooks_match_gloo(nodes, per_node):
    results = run("comm_hooks_worker:compare_hooks", nodes, per_node, timeout=300)
    for r in results:
        assert {n.split(".")[0] for n in r} == {"torch", "haiscale"}, r
        for name, c in r.items():
            assert c["moved"] > 1e-3, f"{name}: training did not move the parameters"
            assert c["hook_calls"] > 0, f"{name}: the hook was never called"
            if name.startswith("haiscale.") and name != "haiscale.allreduce_vs_builtin":
                assert c["buckets"] > 2, f"{name}: the hook saw {c['buckets']} buckets, not several"
            assert c["worst"] <= c["tolerance"], f"{name}: hfreduce and gloo differ by {c['worst']}"


def test_haiscale_ddp_comm_hook_misuse_is_a_clear_error():
    results = run("comm_hooks_worker:hook_misuse", 1, 2, timeout=120)
    want = {"not_callable": "must be callable", "twice": "only be called once",
            "bf16_and_hook": "gradient_dtype and a comm hook", "after_backward": "before the first backward",
            "returns_tensor": "must return a torch.futures.Future", "wrong_size": "must hold the bucket's"}
    for r in results:
        for name, text in want.items():
            assert r["errors"][name] is not None, f"{name}: no error raised"
            assert text in r["errors"][name], f"{name}: {r['errors'][name]}"
        assert r["grad_norm"] > 0
