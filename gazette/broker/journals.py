"""List, Apply, ListFragments and Flush RPCs: the journal-space operations
(docs/semantics.md#list-apply-and-listfragments).

List and Apply read and write JournalSpecs under `<root>/items/`; Apply is one etcd transaction of
compare-and-swaps on mod revisions and responds only once this broker's KeySpace observed it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import aetcd
import grpc

from gazette.auth.tokens import Claims
from gazette.broker.append import zero_byte_append
from gazette.broker.read import acknowledged_at_primary
from gazette.fragment.health import check_delete, health_of
from gazette.keyspace import layout
from gazette.protocol import broker_pb2 as pb
from gazette.protocol import gazette_py_pb2 as gpy
from gazette.protocol.errors import GazetteError, ValidationError
from gazette.protocol.labels import LabelSet
from gazette.protocol.selector import LabelSelector, journal_labels
from gazette.protocol.spec import JournalSpec, validate_store_url
from gazette.protocol.status import Status, to_pb
from gazette.protocol.validate import validate_journal_name

if TYPE_CHECKING:
    from gazette.broker.context import BrokerContext

log = logging.getLogger(__name__)

LIST_CHUNK_JOURNALS = 25
FLUSH_TIMEOUT_S = 60.0
FLUSH_DEADLINE_SHARE = 0.8  # of the caller's remaining deadline a Flush may spend waiting on the store
FRAGMENTS_PAGE_DEFAULT = 1000
FRAGMENTS_PAGE_MAX = 10000


def _matching(
    broker: BrokerContext, selector: LabelSelector, authorized: LabelSelector | None
) -> list[pb.ListResponse.Journal]:
    out = []
    for kv in broker.ks.prefixed(layout.items_prefix(broker.root)):
        spec: JournalSpec = kv.decoded
        labels = journal_labels(spec.labels, spec.name)
        if not selector.matches(labels) or (authorized is not None and not authorized.matches(labels)):
            continue
        route = broker.resolver.route_of(spec.name)
        out.append(
            pb.ListResponse.Journal(
                spec=spec.to_proto(),
                mod_revision=kv.mod_revision,
                create_revision=kv.create_revision,
                route=route,
            )
        )
    return out


def _claims_for_list(claims: Claims) -> LabelSelector:
    """The claims' selector with the `prefix` meta-label read as a name prefix, as Gazette's List
    reads it (only List does; its values need not end in "/" there)."""
    sel = claims.selector

    def rewrite(entries):
        return [
            (e.name, e.value, e.prefix) if e.name != "prefix" else ("name", e.value, True) for e in entries
        ]

    return LabelSelector(rewrite(sel.include), rewrite(sel.exclude))


async def serve_list(
    broker: BrokerContext,
    req: pb.ListRequest,
    context: grpc.aio.ServicerContext,
    claims: Claims | None = None,
) -> AsyncIterator[pb.ListResponse]:
    try:
        selector = LabelSelector.from_proto(req.selector).for_journals()
        authorized = _claims_for_list(claims) if claims is not None else None
    except GazetteError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    if req.watch_resume.etcd.revision:
        await broker.ks.wait_for_revision(req.watch_resume.etcd.revision + 1)
    last: tuple[int, int] | None = None
    while True:
        journals = _matching(broker, selector, authorized)
        state = (len(journals), max((j.mod_revision for j in journals), default=0))
        if state != last:
            last = state
            header = broker.resolver.header()
            for i in range(0, max(len(journals), 1), LIST_CHUNK_JOURNALS):
                chunk = journals[i : i + LIST_CHUNK_JOURNALS]
                if i == 0:
                    yield pb.ListResponse(status=to_pb(Status.OK), header=header, journals=chunk)
                else:
                    yield pb.ListResponse(journals=chunk)
            if not req.watch:
                return
            yield pb.ListResponse()  # end of this snapshot
        await broker.ks.wait_for_change()


async def serve_apply(
    broker: BrokerContext,
    req: pb.ApplyRequest,
    context: grpc.aio.ServicerContext,
    claims: Claims | None = None,
) -> pb.ApplyResponse:
    compares, ops = [], []
    storeless: list[str] = []
    tx = broker.etcd.transactions
    try:
        for ch in req.changes:
            if ch.HasField("upsert") == bool(ch.delete):
                raise ValidationError("each change must have exactly one of upsert or delete")
            if ch.HasField("upsert"):
                spec = JournalSpec.from_proto(ch.upsert)
                spec.validate()
                # Gazette authorizes an upsert against the journal's labels and meta-labels as
                # upserted, and a delete by its name alone; one refusal refuses the whole Apply.
                if claims is not None and not claims.matches(journal_labels(spec.labels, spec.name)):
                    await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"not authorized to {spec.name}")
                if not spec.stores:
                    storeless.append(spec.name)
                key = layout.item_key(broker.root, spec.name)
                ops.append(tx.put(key.encode(), ch.upsert.SerializeToString()))
            else:
                validate_journal_name(ch.delete)
                if claims is not None and not claims.matches(journal_labels(LabelSet(), ch.delete)):
                    await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"not authorized to {ch.delete}")
                if ch.expect_mod_revision == 0:
                    raise ValidationError(
                        f'deleting journal "{ch.delete}" needs its mod revision (or -1 to ignore it)'
                    )
                key = layout.item_key(broker.root, ch.delete)
                ops.append(tx.delete(key.encode()))
            if ch.expect_mod_revision != -1:
                compares.append(tx.mod(key.encode()) == ch.expect_mod_revision)
    except GazetteError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    try:
        ok, responses = await broker.etcd.transaction(compare=compares, success=ops, failure=[])
    except aetcd.exceptions.ClientError as exc:
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"etcd transaction failed: {exc}")
    if not ok:
        return pb.ApplyResponse(status=to_pb(Status.ETCD_TRANSACTION_FAILED), header=broker.resolver.header())
    for name in storeless:
        log.warning(
            "journal %s has no fragment stores: its content lives only in its brokers' spools, and what "
            "no current replica holds (its replicas replaced or restarted) is gone; readers jump past it",
            name,
        )
    revision = _txn_revision(responses)
    if revision:
        await broker.ks.wait_for_revision(revision)
    return pb.ApplyResponse(status=to_pb(Status.OK), header=broker.resolver.header())


def _txn_revision(responses: list) -> int:
    """The revision an Apply transaction wrote at (0 if it changed nothing under the root)."""
    revision = 0
    for op in responses:
        kind = op.WhichOneof("response")
        if kind == "response_put":
            revision = max(revision, op.response_put.header.revision)
        elif kind == "response_delete_range" and op.response_delete_range.deleted:
            revision = max(revision, op.response_delete_range.header.revision)
    return revision


async def serve_list_fragments(
    broker: BrokerContext,
    req: pb.FragmentsRequest,
    context: grpc.aio.ServicerContext,
    claims: Claims | None = None,
) -> pb.FragmentsResponse:
    try:
        validate_journal_name(req.journal)
        if req.page_limit < 0 or req.page_limit > FRAGMENTS_PAGE_MAX:
            raise ValidationError(
                f"page_limit {req.page_limit} is invalid (expected 0..{FRAGMENTS_PAGE_MAX})"
            )
    except GazetteError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    res = await broker.resolver.resolve(
        req.journal,
        require_primary=False,
        may_proxy=not req.do_not_proxy,
        proxy_header=req.header if req.HasField("header") else None,
        claims=claims,
    )
    if res.status != Status.OK:
        return pb.FragmentsResponse(status=to_pb(res.status), header=res.header)
    if res.replica is None:
        return await broker.proxy.list_fragments(res, req)
    index = res.replica.index
    await index.wait_first_refresh()
    if not res.replica.is_primary and index.pending_end() > index.end_offset():
        # Commits this replica holds back may be held by every member by now: it asks the primary,
        # as a read does (docs/semantics.md#no-dirty-reads), and lists what every member holds.
        head = await acknowledged_at_primary(broker, req.journal)
        if head is not None:
            index.acknowledge_through(head)
    limit = req.page_limit or FRAGMENTS_PAGE_DEFAULT
    ttl = req.signatureTTL.ToTimedelta().total_seconds() if req.HasField("signatureTTL") else 0.0
    out: list[pb.FragmentsResponse._Fragment] = []
    next_token = 0
    for frag in index.fragments():
        if frag.begin < req.next_page_token:
            continue
        if req.begin_mod_time and frag.mod_time and frag.mod_time < req.begin_mod_time:
            continue
        # Gazette's bound is inclusive (a fragment persisted at end_mod_time is listed), whatever
        # its proto comment says: `gazctl journals fragments --to T` lists those of second T.
        if req.end_mod_time and (frag.mod_time == 0 or frag.mod_time > req.end_mod_time):
            continue
        if len(out) == limit:
            next_token = frag.begin
            break
        url = ""
        if ttl and frag.backing_store:
            url = await broker.sign_url(frag, ttl)
        out.append(pb.FragmentsResponse._Fragment(spec=frag.to_proto(), signed_url=url))
    return pb.FragmentsResponse(
        status=to_pb(Status.OK), header=res.header, fragments=out, next_page_token=next_token
    )


async def serve_flush(
    broker: BrokerContext,
    req: gpy.FlushRequest,
    context: grpc.aio.ServicerContext,
    claims: Claims | None = None,
) -> gpy.FlushResponse:
    try:
        validate_journal_name(req.journal)
    except GazetteError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    res = await broker.resolver.resolve(
        req.journal,
        require_primary=True,
        may_proxy=True,
        proxy_header=req.header if req.HasField("header") else None,
        claims=claims,
    )
    if res.status != Status.OK:
        return gpy.FlushResponse(status=to_pb(res.status), header=res.header)
    if res.replica is None:
        try:
            return await broker.proxy.flush(res, req)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            primary = res.route.endpoints[res.route.primary] if res.route.primary >= 0 else "?"
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                f"the primary of {req.journal} at {primary} is not a gazette-py broker: it answered "
                f"UNIMPLEMENTED ({exc.details()})",
            )
            raise  # abort raises; this only tells the type checker so
    fsm = await zero_byte_append(broker, req.journal, force_roll=True)
    if fsm.err is not None or fsm.status != Status.OK:
        status = fsm.status if fsm.status != Status.OK else Status.INSUFFICIENT_JOURNAL_BROKERS
        return gpy.FlushResponse(status=to_pb(status), header=res.header, store_error=str(fsm.err or ""))
    # Answer within the caller's deadline (most of what is left of it), so a store that keeps failing
    # is reported with its error rather than as the client's own timeout.
    budget = FLUSH_TIMEOUT_S
    remaining = context.time_remaining()
    if remaining is not None:
        budget = max(0.0, min(budget, remaining * FLUSH_DEADLINE_SHARE))
    try:
        async with asyncio.timeout(budget):
            persisted = await res.replica.wait_persisted(fsm.rolled)
    except (TimeoutError, GazetteError) as exc:
        # The store is down or refused: the rolled spool stays queued in the persister, which
        # keeps retrying; nothing committed is dropped.
        error = health_of(res.spec.stores[0]).error if res.spec and res.spec.stores else None
        return gpy.FlushResponse(
            status=to_pb(Status.FRAGMENT_STORE_UNHEALTHY),
            header=res.header,
            store_error=error
            or broker.persister.last_error(req.journal)
            or str(exc)
            or f"not persisted within {budget:.0f}s",
        )
    resp = gpy.FlushResponse(status=to_pb(Status.OK), header=res.header)
    if persisted is not None:
        resp.fragment.CopyFrom(persisted.to_proto())
    return resp


async def serve_fragment_store_health(
    broker: BrokerContext, req: pb.FragmentStoreHealthRequest, context: grpc.aio.ServicerContext
) -> pb.FragmentStoreHealthResponse:
    """Gazette's FragmentStoreHealth: the store's latest health check (waiting for a first one), and
    with `check_delete` a put-then-remove probe under `check_delete_prefix` (gazctl shards prune asks
    before it deletes). Any store URL may be asked about, not only those of this broker's journals."""
    try:
        validate_store_url(req.fragment_store, what="fragment_store")
    except GazetteError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    resp = pb.FragmentStoreHealthResponse(status=to_pb(Status.OK), header=broker.resolver.header())
    error = await health_of(req.fragment_store).status()
    if error is None and req.check_delete:
        error = await check_delete(req.fragment_store, req.check_delete_prefix)
    if error is not None:
        resp.status = to_pb(Status.FRAGMENT_STORE_UNHEALTHY)
        resp.store_health_error = error
    return resp
