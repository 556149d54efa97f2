"""Notebook tools: the `%gazette` magics and live ipywidgets views of journals, fragments,
sequencers and checkpoints.

`%load_ext gazette.notebook` registers the magics; `current_cluster()` / `current_client()` give
code in the notebook the cluster and client they use; the views are plain classes usable anywhere.
"""

from gazette.notebook.magics import (
    GazetteMagics,
    NotebookError,
    Table,
    current_client,
    current_cluster,
    load_ipython_extension,
)
from gazette.notebook.widgets import CheckpointView, ClusterView, JournalView, SequencerView

__all__ = [
    "CheckpointView",
    "ClusterView",
    "GazetteMagics",
    "JournalView",
    "NotebookError",
    "SequencerView",
    "Table",
    "current_client",
    "current_cluster",
    "load_ipython_extension",
]
