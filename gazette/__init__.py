"""gazette-py: the Gazette streaming platform in Python.

Transactional, replicated byte journals (`gazette.broker`), exactly-once messages
(`gazette.message`), consumers (`gazette.consumer`), a local cluster (`gazette.local`) and
notebook tools; `fragments_io` reads persisted fragments from Spark. This module re-exports the
public names of API.md and nothing more.
"""

import os as _os

# grpc logs a line on every fork (LocalCluster starts subprocesses); quiet it unless asked for.
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
_os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from gazette import aio  # noqa: E402
from gazette.client.sync import Client, connect  # noqa: E402
from gazette.client.timeouts import CallTimeout  # noqa: E402
from gazette.fragment.fragment import Fragment  # noqa: E402
from gazette.protocol.errors import (  # noqa: E402
    AppendError,
    ConfigurationError,
    FencedError,
    GazetteError,
    PeerError,
    StateError,
    StoreError,
    ValidationError,
)
from gazette.protocol.spec import JournalSpec  # noqa: E402
from gazette.protocol.status import Status  # noqa: E402

__all__ = [
    "AppendError",
    "CallTimeout",
    "Client",
    "ConfigurationError",
    "FencedError",
    "Fragment",
    "GazetteError",
    "JournalSpec",
    "PeerError",
    "StateError",
    "Status",
    "StoreError",
    "ValidationError",
    "aio",
    "connect",
]


def _version() -> str:
    """The installed distribution's version, else (a source tree never installed) pyproject's."""
    from importlib import metadata

    try:
        return metadata.version("gazette-py")
    except metadata.PackageNotFoundError:
        import pathlib
        import tomllib

        pyproject = pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml"
        try:
            return str(tomllib.loads(pyproject.read_text())["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "0+unknown"


__version__ = _version()


def load_ipython_extension(ipython) -> None:  # noqa: ANN001
    """`%load_ext gazette` (API.md): the `%gazette` magics, importing IPython only when asked."""
    from gazette.notebook.magics import load_ipython_extension as load

    load(ipython)
