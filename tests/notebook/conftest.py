"""Fixtures for notebook tests: an IPython shell with the extension loaded and a cluster started by
`%gazette up` (its own embedded etcd), shared by a module and stopped by `%gazette down`."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from IPython.core.getipython import get_ipython
from IPython.testing.globalipapp import start_ipython

from gazette.notebook import GazetteMagics

NDJSON = {"content-type": "application/x-ndjson"}
_names = itertools.count()


@pytest.fixture(scope="session")
def shell():
    # start_ipython() answers None once a shell exists (another test module may have started it); then
    # IPython's own get_ipython finds it (globalipapp's get_ipython would only call start_ipython again).
    ip = start_ipython() or get_ipython()
    ip.run_line_magic("load_ext", "gazette.notebook")
    return ip


@pytest.fixture(scope="module")
def magics(shell) -> Iterator[GazetteMagics]:
    m = shell.magics_manager.registry["GazetteMagics"]
    m.run("up --brokers 1")
    try:
        yield m
    finally:
        if m.cluster is not None:
            m.run("down")


@pytest.fixture
def journal(magics) -> str:
    """A fresh JSON-lines journal with a route."""
    name = f"tests/notebook/j-{next(_names):03d}"
    magics.cluster.client().apply_journals([magics.cluster.journal_spec(name, labels=NDJSON)])
    magics.cluster.wait_for_routes([name])
    return name
