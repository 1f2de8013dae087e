"""Reading manifests: YAML built from libyaml's events as PyYAML's SafeLoader builds it, but
refusing what kubectl refuses (a key given twice), naming the file, line and column, and
never nesting deep enough to overflow a stack."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from topogate.api.errors import InputError
from topogate.cli import main
from topogate.files import _yaml_documents, documents

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_CLUSTER = ROOT / "topogate" / "examples" / "cluster.yaml"
EXAMPLE_JOB = ROOT / "topogate" / "examples" / "training-job.yaml"


def _plan(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(["plan", *argv])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "text",
    [
        EXAMPLE_CLUSTER.read_text(),
        EXAMPLE_JOB.read_text(),
        "a: 1\nb: [x, {c: 2}]\n---\n---\nx: &a {p: 1}\ny: *a\nz:\n  <<: *a\n  q: 2\n",
        "base: &b {x: 1, y: 2}\nmore: &m {y: 3, z: 4}\nboth:\n  <<: [*b, *m]\n  x: 9\n",
        "t: 2001-01-01\nts: 2001-01-01T10:00:00Z\nn: ~\nb: yes\nf: 1.5\ni: 0x10\ne: ''\np:\n"
        "s: !!str 5\nq: '5'\nbig: 123456789012345678901234567890\nneg: -.inf\no: 0o17\n"
        "bin: !!binary aGVsbG8=\nlit: |\n  two\n  lines\nfold: >\n  one\n  line\n",
        "- [1, 2]\n- {a: b}\n- - nested\n  - list\n- &s scalar\n- *s\n",
        "",
        "# only a comment\n",
    ],
)
def test_documents_are_built_as_safeloader_builds_them(text: str) -> None:
    assert list(_yaml_documents(text, "f")) == list(yaml.safe_load_all(text))


def test_merged_keys_keep_safeloader_s_order_and_precedence() -> None:
    text = "base: &b {x: 1, y: 2}\nmore: &m {y: 3, z: 4}\nboth:\n  <<: [*b, *m]\n  x: 9\n"
    (ours,) = _yaml_documents(text, "f")
    (theirs,) = yaml.safe_load_all(text)
    assert list(ours["both"].items()) == list(theirs["both"].items())
    assert list(ours["both"].items()) == [("x", 9), ("y", 2), ("z", 4)]


def _job_text(annotations: str, spec_twice: bool = False) -> str:
    spec = "spec:\n  parallelism: 2\n"
    return (
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: train\n  namespace: research\n"
        f"{spec if spec_twice else ''}"
        "spec:\n  parallelism: 2\n  template:\n    metadata:\n      annotations:\n"
        f"{annotations}"
        "    spec:\n      restartPolicy: Never\n      containers:\n      - name: c\n"
        "        image: x\n        resources: {limits: {nvidia.com/gpu: 8}}\n"
    )


def test_an_annotation_written_twice_is_refused_naming_file_line_and_key(tmp_path: Path) -> None:
    # PyYAML kept the last value: the job was planned on "rack" with no word said.
    job = tmp_path / "job.yaml"
    job.write_text(
        _job_text(
            "        kueue.x-k8s.io/podset-required-topology: cloud.example.com/topology-block\n"
            "        kueue.x-k8s.io/podset-required-topology: cloud.example.com/topology-rack\n"
        )
    )
    code, out, err = _plan("--cluster", str(EXAMPLE_CLUSTER), "--workload", str(job))
    assert (code, out) == (2, "")
    assert err == (
        f"topogate plan: error: {job}: invalid YAML: line 12, column 9: key "
        "'kueue.x-k8s.io/podset-required-topology' is given twice in one mapping (kubectl "
        "refuses it; a missing --- between two documents reads that way)\n"
    )


def test_a_spec_written_twice_is_named_not_a_missing_template(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(_job_text("        a: b\n", spec_twice=True))
    code, _, err = _plan("--cluster", str(EXAMPLE_CLUSTER), "--workload", str(job))
    assert code == 2
    assert "spec.template" not in err
    assert "line 8, column 1: key 'spec' is given twice" in err


def test_two_files_pasted_together_without_a_separator_are_refused(tmp_path: Path) -> None:
    # The second List replaced the first one's items: its nodes were lost silently.
    text = EXAMPLE_CLUSTER.read_text()
    nodes = [d for d in yaml.safe_load_all(text) if d and d.get("kind") == "Node"]
    first = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes[:8]})
    second = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes[8:]})
    pasted = tmp_path / "cluster.yaml"
    pasted.write_text(first + second)
    with pytest.raises(InputError) as caught:
        list(documents(pasted))
    assert caught.value.where == str(pasted)
    line = first.count("\n") + 1
    assert f"line {line}, column 1: key 'apiVersion' is given twice" in caught.value.message


@pytest.mark.parametrize(
    "text",
    [
        "[" * 30_000 + "]" * 30_000,
        "- " * 30_000 + "x\n",
        "a: " + "{a: " * 30_000 + "1" + "}" * 30_000 + "\n",
        "- " * 400 + "[" * 400 + "]" * 400 + "\n",  # under 1,000 of each kind, 800 in all
    ],
)
def test_yaml_nested_thousands_deep_is_refused_in_a_line(tmp_path: Path, text: str) -> None:
    # Under libyaml 0.2.5 PyYAML's recursive C composer overflowed the stack near 30,000
    # levels (exit 139); 0.2.6 refuses past 1,000 levels of one kind. Events are read
    # without recursion and all levels counted.
    cluster = tmp_path / "deep.yaml"
    cluster.write_text(text)
    argv = ["plan", "--cluster", str(cluster), "--workload", str(EXAMPLE_JOB)]
    done = subprocess.run(
        [sys.executable, "-m", "topogate", *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(
        f"topogate plan: error: {cluster}: is nested too deeply (line 1, column "
    )
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("a: !!set {x, y}\n", "line 1, column 4: the tag tag:yaml.org,2002:set is not read"),
        ("a: !custom 5\n", "line 1, column 4: the tag !custom is not read"),
        ("? [a]\n: 1\n", "line 1, column 3: a key must be a string, not a collection"),
        ("a: *nowhere\n", "line 1, column 4"),
        ("a: {<<: 5}\n", "line 1, column 9: << merges a mapping or a list of mappings"),
    ],
)
def test_what_safeloader_would_build_oddly_is_refused_with_its_place(
    tmp_path: Path, text: str, says: str
) -> None:
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        list(documents(path))
    assert caught.value.where == str(path)
    assert caught.value.message.startswith("invalid YAML: ")
    assert says in caught.value.message


def test_a_node_list_s_items_without_their_own_kind_are_nodes(tmp_path: Path) -> None:
    # `kubectl get --raw /api/v1/nodes` gives a NodeList whose items carry no kind: they
    # were skipped as "<no kind>" and the plan found no nodes.
    docs = [d for d in yaml.safe_load_all(EXAMPLE_CLUSTER.read_text()) if d]
    nodes = [d for d in docs if d["kind"] == "Node"]
    for node in nodes:
        del node["kind"]
        del node["apiVersion"]
    listing = tmp_path / "nodes.yaml"
    listing.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "NodeList", "items": nodes}))
    rest = tmp_path / "rest.yaml"
    rest.write_text(yaml.safe_dump_all([d for d in docs if "kind" in d and d["kind"] != "Node"]))
    code, out, err = _plan(
        "--cluster", str(listing), "--cluster", str(rest), "--workload", str(EXAMPLE_JOB)
    )
    assert (code, err) == (0, "")
    assert out == _plan("--example")[1]


def test_scalars_resolve_to_safeloader_s_types() -> None:
    written = [
        "1e3", ".5", "-1", "+1", "0b101", "1_000", "0x_1F", "1:20", "190:20:30", "~", "Null",
        "True", "On", "off", "y", "n", "-.Inf", "0o7", "07", "08", "1.0e+3", "12e03", "0.",
        '"q"', "'s'", '!!int "3"', "!!float 3", '!!null ""', "!!bool yes", "! 12",
        "2002-12-14", "2001-12-14t21:59:43.10-05:00",
    ]  # fmt: skip
    text = "".join(f"k{i}: {value}\n" for i, value in enumerate(written))
    (ours,) = _yaml_documents(text, "f")
    (theirs,) = yaml.safe_load_all(text)
    assert [repr(v) for v in ours.values()] == [repr(v) for v in theirs.values()]


def test_a_json_key_given_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text('{"kind": "Job", "spec": {"parallelism": 1}, "spec": {"parallelism": 2}}')
    with pytest.raises(InputError) as caught:
        list(documents(path))
    assert (caught.value.where, caught.value.message) == (
        str(path),
        "invalid JSON: key 'spec' is given twice in one object (kubectl refuses it)",
    )
