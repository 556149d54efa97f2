"""`gazette consumer run`: one Consumer member as a process, and how an Application gets into it.

The application is `module:Class` (instantiated with keyword arguments from JSON) or a file of
cloudpickle bytes (`pickle_application`, what LocalCluster.run_consumer writes). When ready the process
prints one JSON line to stdout ({"endpoint", "metrics", "zone", "suffix", "root", "pid"}), as `gazette broker
serve` does. SIGTERM or SIGINT stop it gracefully (its shards move first); a lost lease ends it with
LEASE_LOST_EXIT_CODE. Whatever ends it, its last line on stderr says why and with which status
(EXIT_LINE_PREFIX ...), for people and for supervisors reading its log.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import signal
import sys
import types
from collections.abc import Mapping
from typing import Any

from gazette import logsetup
from gazette.consumer.application import Application
from gazette.consumer.consumer import Consumer
from gazette.logsetup import configure
from gazette.protocol.errors import ValidationError
from gazette.tasks import dump_tasks

LEASE_LOST_EXIT_CODE = 3
FAILED_EXIT_CODE = 1
EXIT_LINE_PREFIX = "gazette consumer run: member "


class ApplicationLoadError(ValidationError):
    """An Application could not be pickled for, or loaded in, a consumer process; says how to fix it."""


def _find_spec_afresh(name: str, path: Any) -> Any:
    """What the import system would find for `name` if it were not imported yet (sys.modules aside)."""
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        try:
            spec = find_spec(name, path)
        except (ImportError, ValueError, AttributeError):
            continue
        if spec is not None:
            return spec
    return None


def _importable_as_is(module: types.ModuleType) -> bool:
    """True if a fresh interpreter with this process's sys.path imports `module` from the same file."""
    path: Any = None
    spec = None
    parts = module.__name__.split(".")
    for i in range(len(parts)):
        spec = _find_spec_afresh(".".join(parts[: i + 1]), path)
        if spec is None:
            return False
        path = spec.submodule_search_locations
    origin = getattr(spec, "origin", None)
    file = getattr(module, "__file__", None)
    return bool(origin and file) and os.path.realpath(str(origin)) == os.path.realpath(str(file))


def pickle_application(app: Application) -> bytes:
    """`app` as cloudpickle bytes for a consumer subprocess (which gets this process's sys.path).

    Classes of modules a fresh interpreter can import travel by reference; those of `__main__` (a
    notebook), of functions, or of modules it could not import (e.g. pytest's) travel by value.
    """
    import cloudpickle

    if not isinstance(app, Application):
        raise ApplicationLoadError(f"{app!r} is not an instance of gazette.consumer.Application")
    cls = type(app)
    by_value = []
    for klass in cls.__mro__:
        module = sys.modules.get(klass.__module__)
        if module is None or klass.__module__ in ("builtins", "__main__") or module in by_value:
            continue
        if not _importable_as_is(module):
            by_value.append(module)
    for module in by_value:
        cloudpickle.register_pickle_by_value(module)
    try:
        data: bytes = cloudpickle.dumps(app)
    except Exception as exc:
        raise ApplicationLoadError(
            f"the Application {cls.__qualname__} (module {cls.__module__}) cannot run in consumer "
            f"subprocesses: cloudpickle could not pickle it ({type(exc).__name__}: {exc}). Keep its "
            "attributes picklable (paths and settings, not open connections, locks or threads; build "
            "those in new_store), or define the class in an importable module and start the process with "
            "`gazette consumer run module:Class`, or run it in-process (LocalCluster(mode='inprocess'))"
        ) from None
    finally:
        for module in by_value:
            cloudpickle.unregister_pickle_by_value(module)
    return data


def load_application(
    target: str | None = None, *, pickle_path: str | None = None, kwargs: Mapping[str, Any] | None = None
) -> Application:
    """The Application of `module:Class` (called with `kwargs`; a `module:instance` is used as is) or
    of a file written from `pickle_application`."""
    if (target is None) == (pickle_path is None):
        raise ApplicationLoadError("give exactly one of an application (module:Class) and a pickle file")
    if pickle_path is not None:
        import cloudpickle

        try:
            with open(pickle_path, "rb") as f:
                app = cloudpickle.load(f)
        except (OSError, ImportError, AttributeError, EOFError) as exc:
            raise ApplicationLoadError(
                f"the application pickle {pickle_path} could not be loaded ({type(exc).__name__}: {exc}); "
                "its class must be importable here, or picklable by value"
            ) from None
    else:
        assert target is not None
        module_name, sep, attr = target.partition(":")
        if not sep or not module_name or not attr:
            raise ApplicationLoadError(f'application "{target}" is not of the form module:Class')
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ApplicationLoadError(
                f'application "{target}": module {module_name} cannot be imported ({exc}); is it on PYTHONPATH?'
            ) from None
        obj: Any = module
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise ApplicationLoadError(f'application "{target}": {module_name} has no attribute {attr}')
            obj = getattr(obj, part)
        if isinstance(obj, type):
            try:
                app = obj(**dict(kwargs or {}))
            except TypeError as exc:
                raise ApplicationLoadError(
                    f'application "{target}" could not be built with arguments {dict(kwargs or {})}: {exc}'
                ) from None
        else:
            if kwargs:
                raise ApplicationLoadError(f'application "{target}" is an instance: it takes no arguments')
            app = obj
    if not isinstance(app, Application):
        raise ApplicationLoadError(f"{app!r} is not an instance of gazette.consumer.Application")
    return app


async def serve(consumer: Consumer) -> None:
    await consumer.start()
    ready = {
        "endpoint": consumer.endpoint,
        "metrics": consumer.metrics_endpoint,
        "zone": consumer.zone,
        "suffix": consumer.suffix,
        "root": consumer.root,
        "pid": os.getpid(),
    }
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    received: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    loop.add_signal_handler(signal.SIGUSR2, dump_tasks)  # what each task waits on, to the log
    # Ready only once the handlers are in place: a signal sent at once must not kill it unhandled.
    print(json.dumps(ready), flush=True)
    signalled = asyncio.ensure_future(stop.wait())
    stopped = asyncio.ensure_future(consumer.stopped.wait())  # by itself: its lease was lost
    await asyncio.wait({signalled, stopped}, return_when=asyncio.FIRST_COMPLETED)
    signalled.cancel()
    stopped.cancel()
    lease_lost = consumer.stopped.is_set()
    await consumer.stop(graceful=True)
    if lease_lost:
        reason = consumer.session.lost_reason
        say_exit(
            consumer, LEASE_LOST_EXIT_CODE,
            f"its etcd lease was lost ({reason or 'no reason given'}): it was paused, or cut off from etcd, "
            f"for longer than its lease TTL ({consumer.lease_ttl_s} s), and its shards went to other members",
        )  # fmt: skip
        raise SystemExit(LEASE_LOST_EXIT_CODE)
    say_exit(consumer, 0, f"stopped by {' and '.join(received) or 'a signal'} (its shards moved first)")


def say_exit(consumer: Consumer, status: int, why: str) -> None:
    """The member's last word on stderr: one line with its id, exit status and why it stops (with
    --log-format json, a JSON object whose "msg" is that line)."""
    text = f"{EXIT_LINE_PREFIX}{consumer.zone}#{consumer.suffix} of {consumer.root} exits with status {status}: {why}"
    level = logging.INFO if status == 0 else logging.ERROR
    print(logsetup.line(level, text, __name__, status=status), file=sys.stderr, flush=True)


def run(consumer: Consumer, log_level: str | None = None, log_format: str | None = None) -> None:
    """Serves until signalled, logging to stderr at `log_level` in `log_format` (gazette.logsetup;
    None: as configured already, e.g. by `gazette --log-format`, else warning and text)."""
    configure(log_level, log_format)
    try:
        asyncio.run(serve(consumer))
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:  # the CLI reports it too (one line, or a traceback)
        say_exit(consumer, FAILED_EXIT_CODE, f"it failed: {type(exc).__name__}: {exc}")
        raise
