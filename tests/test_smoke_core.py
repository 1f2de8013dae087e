from tests.kit import BLOCK, L3, RACK, default_nodes, hosts, node, podset, run


def test_minimize_racks_before_nodes() -> None:
    nodes = [
        node("b1-r1-x3", "b1", "r1", "x3", cpu=2000),
        node("b1-r2-x5", "b1", "r2", "x5", cpu=2000, pods=20),
        node("b1-r3-x1", "b1", "r3", "x1", cpu=1000),
        node("b1-r3-x6", "b1", "r3", "x6", cpu=1000),
        node("b1-r3-x2", "b1", "r3", "x2", cpu=1000),
        node("b1-r3-x4", "b1", "r3", "x4", cpu=1000),
    ]
    decision = run(nodes, L3, podset(4, cpu=1000, required=BLOCK))
    assert hosts(decision) == {"x1": 1, "x2": 1, "x4": 1, "x6": 1}


def test_block_preferred_rack_slices() -> None:
    decision = run(default_nodes(), L3, podset(4, cpu=1000, preferred=BLOCK, slice=(RACK, 2)))
    assert hosts(decision) == {"x1": 1, "x5": 1, "x4": 2}
