"""Gazette's own example journalspace YAML, as it is in Gazette's source, applied once by real gazctl
and once by gazette-py's `gazette journals apply`: both must store the very same JournalSpecs.

The file (kustomize/test/bases/environment/examples.journalspace.yaml of the pinned Gazette) uses
the hierarchy, label inheritance, a label without a value, an s3:// store with `profile` and an
escaped `endpoint`, durations, a SNAPPY codec and a Go-template path postfix. gazctl parses it with
Gazette's own code and sends the result over the wire; ours parses it with ours. The specs listed
back (and their protobuf encodings) must be equal, journal by journal.
"""

from __future__ import annotations

import cli_run
import pytest
from interop.conftest import gazctl_for, gazette_source

from gazette.local import LocalCluster
from gazette.protocol.spec import load_specs_yaml

EXAMPLES = "kustomize/test/bases/environment/examples.journalspace.yaml"


@pytest.fixture(scope="module")
def one_broker():
    with LocalCluster(brokers=1, mode="subprocess") as cluster:
        yield cluster


def _specs(cluster: LocalCluster) -> dict[str, bytes]:
    return {
        info.spec.name: info.spec.to_proto().SerializeToString(deterministic=True)
        for info in cluster.client().list_journals()
        if info.spec.name.startswith("examples/")
    }


def test_gazettes_example_journalspace_applies_the_same_through_gazctl_and_ours(
    one_broker: LocalCluster, gazctl_bin: str, tmp_path
) -> None:
    path = gazette_source() / EXAMPLES
    text = path.read_text()
    ours_parsed = [c.spec.name for c in load_specs_yaml(text)]
    assert len(ours_parsed) > 20 and all(n.startswith("examples/") for n in ours_parsed)

    gazctl = gazctl_for(gazctl_bin, one_broker, str(tmp_path))
    gazctl("journals", "apply", "--specs", str(path))
    by_gazctl = _specs(one_broker)
    assert sorted(by_gazctl) == sorted(ours_parsed), "gazctl applied other journals than our loader read"

    one_broker.client().delete_journals(by_gazctl)
    assert _specs(one_broker) == {}
    out = cli_run.ok(
        cli_run.gazette("journals", "apply", "--specs", str(path), "--broker", one_broker.broker_endpoints[0])
    )
    by_ours = _specs(one_broker)
    assert by_ours == by_gazctl, (
        "specs differ: "
        + ", ".join(n for n in by_gazctl if by_ours.get(n) != by_gazctl[n])
        + f"\n(our apply said: {out[-500:]})"
    )
    leaf = next(i.spec for i in one_broker.client().list_journals() if i.spec.name == "examples/foobar")
    assert leaf.path_postfix_template == 'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}'
    assert leaf.labels.value_of("example-journals") == ""
