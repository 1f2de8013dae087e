from tests.kit import BLOCK, L1, L2, L3, RACK, assigned, default_nodes, hosts, node, podset, run
from tests.kit import HOST as HOST_LEVEL
from topogate.api.podspec import Taint


def test_per_node_counting_where_kueue_sums_a_leaf() -> None:
    """Two 3-CPU nodes in one rack: Kueue's summed leaf (6 CPU) would take a 4-CPU pod."""
    nodes = [node("a", "b1", "r1", cpu=3000), node("b", "b1", "r1", cpu=3000)]
    decision = run(nodes, L2, podset(1, cpu=4000, required=RACK))
    assert not decision.fits
    assert decision.message == (
        'topology "default" doesn\'t allow to fit any of 1 pod(s). Total nodes: 2; excluded: resource "cpu": 2'
    )
    assert hosts(run(nodes, L2, podset(2, cpu=3000, required=RACK))) == {"r1": 2}


def test_resource_no_node_has() -> None:
    decision = run(default_nodes(), L3, podset(1, requests={"example.com/fpga": 1}, required=BLOCK))
    assert not decision.fits
    assert decision.message.endswith('Total nodes: 6; excluded: resource "example.com/fpga": 6')


def test_filters_apply_below_non_hostname_levels() -> None:
    nodes = [
        node("a", "b1", "r1", cpu=1000, taints=[Taint("t", "", "NoExecute")]),
        node("b", "b1", "r2", cpu=1000, labels={"pool": "x"}),
    ]
    decision = run(nodes, L2, podset(1, cpu=1000, required=RACK, node_selector={"pool": "x"}))
    assert assigned(decision) == {("b1", "r2"): 1}


def test_earlier_podsets_take_capacity_per_node_at_rack_leaves() -> None:
    nodes = [node("a", "b1", "r1", cpu=2000), node("b", "b1", "r2", cpu=1000)]
    decision = run(
        nodes,
        L2,
        podset(2, "first", cpu=1000, required=RACK),
        podset(1, "second", cpu=1000, required=RACK),
    )
    assert assigned(decision, "first") == {("b1", "r1"): 2}
    assert assigned(decision, "second") == {("b1", "r2"): 1}
    assert decision.placements[0].node_counts == {"a": 2}


def test_leader_is_checked_against_its_own_template() -> None:
    """Kueue checks the leader with the workers' filters (its #15373); we use the leader's."""
    nodes = [
        node("x1", host="x1", cpu=4000, labels={"role": "cpu"}),
        node("x2", host="x2", cpu=4000, gpu=4),
    ]
    leader = podset(
        1, "leader", cpu=1000, required=HOST_LEVEL, group="g", node_selector={"role": "cpu"}
    )
    workers = podset(2, "workers", cpu=1000, gpu=2, required=HOST_LEVEL, group="g")
    decision = run(nodes, L1, leader, workers)
    assert not decision.fits  # no single host satisfies both templates
    assert decision.podset == "leader+workers"
