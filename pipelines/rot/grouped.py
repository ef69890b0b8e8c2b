"""The rot check of a whole day at once: one verdict per ingredient set, spread
over its calls in polars.

A day's calls share a few hundred ingredient sets (template version,
variables, documents, route, model alias, and the recorded hashes of the
blocks those make: model, params, tools, documents, system). Every call of a
set reaches the same verdict, components and notes: ``Checker.check`` decides
on what the set has in common, and the call's own parts (its messages and
metadata) come from the record on both sides of the comparison. The set is
named by the key stored with each call (``calls.rot_set_key``, see
``pipelines.record.set_key``). So the
check judges each set's classes (one per recorded system prompt) once, with
``Checker.judge`` on the class's columns, and gives the verdict to their
calls; only the per-call columns are computed per call, vectorised:
``recorded_sha256``, ``replay_fidelity`` and, where the request did not
reproduce, ``rerendered_sha256`` (today's blocks spliced around the call's
recorded messages, then hashed).

A template that prints each document's score renders a different system
prompt per call: its calls are grouped without the score, and whether each
call's recorded system prompt reproduces is decided per call from the
template's skeleton and printed slots (``pipelines.rot.printed_scores``),
which is what the set's verdict then also rests on.

Calls this shortcut does not cover go through ``Checker.check`` one by one,
with the same result as before: redacted calls, rows without block hashes or
a request, templates that read scores in other ways.

It relies on what ingest guarantees: ``request_json`` is the canonical JSON of
the request (``record/rows.py`` hashes exactly those bytes into
``request_sha256``), so a call whose stored bytes hash to the recorded hash
holds its messages and metadata between the set's recorded blocks, byte for
byte as ``rerender_request`` serialises them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import orjson
import polars as pl
import polars_hash  # noqa: F401 (registers the chash namespace: sha256 in polars)
import pyarrow as pa

from pipelines.record.canonical import canonical_json, same_block_digest
from pipelines.record.set_key import KEY_COLUMN, metadata_dropped, set_keys
from pipelines.rot.check import (
    APPROXIMATE,
    EXACT,
    NO_BASIS,
    UNVERIFIABLE,
    VERIFIED,
    Checker,
    RotCheck,
    _recorded_documents,
)
from pipelines.rot.class_verdict import ClassJudge, around
from pipelines.rot.class_verdict import reproduces as same_request
from pipelines.rot.printed_scores import PrintedScores, Skeleton, never_reads_scores
from pipelines.rot.redaction import RAW, REDACTED_FLAG
from pipelines.rot.rerender import Rerendered, canonical_object
from pipelines.rot.template_inputs import DocRef

# RotCheck fields that become rot_checks columns (the kept block values are for diffs only).
VERDICT_FIELDS = tuple(f.name for f in fields(RotCheck) if f.name not in ("recorded_blocks", "rerendered_blocks"))
# Verdict columns shared by every call of an ingredient set.
SHARED = ("status", "components", "missing", "rotted_blocks", "basis", "template_sha256", "model_snapshot", "detail")
# What rerender_request leaves out of a falsy recorded metadata value (``if request.get("metadata")``).
_EMPTY_METADATA = tuple(',"metadata":' + v for v in ("{}", "[]", '""', "0", "false"))
_KEY_BLOCKS = ("model", "params", "tools")

VERDICT_SCHEMA = {
    "call_id": pl.String,
    "trace_id": pl.String,
    "service": pl.String,
    "occurred_date": pl.Date,
    "status": pl.String,
    "components": pl.List(pl.String),
    "missing": pl.List(pl.String),
    "rotted_blocks": pl.List(pl.String),
    "basis": pl.String,
    "replay_fidelity": pl.String,
    "recorded_sha256": pl.String,
    "rerendered_sha256": pl.String,
    "template_id": pl.String,
    "template_version": pl.String,
    "template_sha256": pl.String,
    "index_snapshot": pl.String,
    "model_alias": pl.String,
    "model_snapshot": pl.String,
    "detail": pl.List(pl.String),
}


def _full_bytes_retained() -> pl.Expr:
    """``Checker._full_bytes_retained`` for calls redaction did not change."""
    recorded = pl.col("rendered_request_sha256")
    return (
        pl.col("request_json").is_not_null()
        & recorded.is_not_null()
        & pl.col("context_complete").ne(False).fill_null(True)
        & ~pl.col("truncated").fill_null(False)
        & pl.col("request_hash_matches").ne(False).fill_null(True)
        & (pl.col("request_sha256") == recorded).fill_null(False)
    )


def _redacted(checker: Checker) -> pl.Expr:
    redacted = pl.col("flags").list.contains(REDACTED_FLAG).fill_null(False)
    if checker.redaction.audits:
        redacted = redacted | pl.col("call_id").is_in(list(checker.redaction.audits))
    return redacted


def _present(column: str) -> pl.Expr:
    return pl.col(column).is_not_null() & (pl.col(column) != "")


_NOT_WITNESSED = "the recorded request does not hash to rendered_request_sha256"
_NO_TEMPLATE, _NOT_WITNESSED_CODE = 1, 2


def _early_missing(checker: Checker) -> pl.Expr:
    """Why ``Checker.check`` stops before rendering anything on a call redaction did not
    change (``_NO_TEMPLATE``: no template version; ``_NOT_WITNESSED_CODE``: a request the
    hash did not witness); null where the check goes on, or might otherwise (those calls
    go through the check)."""
    checkable = (
        ~_redacted(checker)
        & pl.col("request_json").str.starts_with("{").fill_null(False)
        & _present("rendered_request_sha256")
    )
    # a code per row (the two early verdicts are made once, in ``_early_verdicts``)
    return (
        pl.when(checkable & ~(_present("template_id") & _present("template_version")))
        .then(pl.lit(_NO_TEMPLATE, pl.UInt8))
        .when(checkable & (pl.col("request_hash_matches") == False))  # noqa: E712 (null is not False)
        .then(pl.lit(_NOT_WITNESSED_CODE, pl.UInt8))
    )


def _early_verdicts(checker: Checker, early: pl.DataFrame) -> _Piece:
    """The verdicts of calls the check stops on early, as ``Checker.check`` makes them:
    two verdicts (no template version; a request the hash did not witness) for all of them."""
    table = _frame(
        {
            "status": [UNVERIFIABLE] * 2,
            "components": [[], []],
            "missing": [["template_version"], ["request_matching_hash"]],
            "rotted_blocks": [[], []],
            "basis": [NO_BASIS] * 2,
            "template_sha256": [None] * 2,
            "model_snapshot": [None] * 2,
            "detail": [[], [_NOT_WITNESSED]],
        },
        {k: VERDICT_SCHEMA[k] for k in SHARED},
    )
    rows = early.select(
        "_row",
        _v=(pl.col("_early") - _NO_TEMPLATE).cast(pl.UInt32),
        replay_fidelity=pl.when(pl.col("_retained")).then(pl.lit(EXACT)).otherwise(pl.lit(APPROXIMATE)),
        rerendered_sha256=pl.lit(None, pl.String),
    )
    return _Piece(rows, table)


def _fast_eligible(checker: Checker) -> pl.Expr:
    """Calls whose verdict is their ingredient set's: in a set (``_key``, see
    ``pipelines.record.set_key``), not redacted by the run's audits either, and with stored
    bytes the recorded hash witnessed (the others reach an early verdict per call anyway)."""
    return (
        pl.col("_key").is_not_null()
        & ~_redacted(checker)
        & pl.col("request_hash_matches").ne(False).fill_null(True)
        # the stored bytes are the ones the hash witnessed
        & (pl.col("request_sha256") == pl.col("rendered_request_sha256")).fill_null(False)
    )


def _day_set_keys(calls: pl.DataFrame) -> pl.Series:
    """Each call's ``rot_set_key``: as stored, or computed here (the same function) for rows
    that do not carry the column (rows handed to the check directly)."""
    if KEY_COLUMN in calls.columns:
        return calls.get_column(KEY_COLUMN)
    return set_keys(calls)


# Per-call columns of the verdict, straight from the call.
_OWN = ("call_id", "trace_id", "service", "occurred_date", "template_id", "template_version", "model_alias")


@dataclass
class _Splice:
    """Today's request around a call's recorded messages and metadata, for one set.

    A recorded request is canonical JSON (sorted keys), so it reads
    ``{<keys before messages>,"messages":M[,"metadata":D],<keys after>}``; the keys
    other than messages and metadata hold the set's blocks, the same bytes for every
    call of the set, so the call's own part is what lies between ``prefix`` and
    ``suffix``; the re-rendered request is that part between today's blocks."""

    prefix: str
    suffix: str
    today_prefix: str
    today_suffix: str


def _between(key: str) -> bool:
    return "messages" < key < "metadata"


def _splice(
    recorded: Mapping[str, str], today: Mapping[str, str], today_bounds: tuple[str, str] | None = None
) -> _Splice | None:
    """None when a key would sort between messages and metadata (never in practice).
    ``today_bounds``: today's ``around``, where the class verdict made it already."""
    own = ("messages", "metadata")
    if any(_between(k) for k in (*recorded, *today) if k not in own):
        return None
    prefix, suffix = around({k: v for k, v in recorded.items() if k not in own})
    if today_bounds is None:
        today_bounds = around({k: v for k, v in today.items() if k not in own})
    return _Splice(prefix, suffix, *today_bounds)


def _own_part(request_json: str, splice: _Splice) -> str | None:
    """The call's messages and metadata as the re-rendered request has them."""
    if not (request_json.startswith(splice.prefix) and request_json.endswith(splice.suffix)):
        return None
    middle = request_json[len(splice.prefix) : len(request_json) - len(splice.suffix)]
    for empty in _EMPTY_METADATA:
        if middle.endswith(empty):
            return middle[: -len(empty)]
    return middle


def _rerendered_by_parsing(request_json: str, today: Mapping[str, str]) -> str:
    """``rerender_request``'s hash, the slow way: parse the call's request for its own part."""
    request = json.loads(request_json)
    pieces = {k: v for k, v in today.items() if k not in ("messages", "metadata")}
    pieces["messages"] = json.dumps(
        request.get("messages") or [], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    if request.get("metadata"):
        pieces["metadata"] = canonical_json(request["metadata"])
    return hashlib.sha256(canonical_object(pieces).encode()).hexdigest()


class _Sets:
    """The per-set work of one run: the day's calls, the checker, the templates' slots."""

    def __init__(self, checker: Checker, base: pl.DataFrame):
        self.checker = checker
        self.base = base
        self._columns = [c for c in base.columns if c not in ("_row", "_key")]
        self.printed: dict[str, PrintedScores | None] = {}
        self._no_scores: dict[str, bool] = {}

    def never_reads_scores(self, template) -> bool:
        if template.sha256 not in self._no_scores:
            self._no_scores[template.sha256] = never_reads_scores(template)
        return self._no_scores[template.sha256]

    def calls(self, rows: pl.Series | list[int]) -> list[dict[str, Any]]:
        """The calls at these row positions, as ``Checker.check`` takes them (the same
        values as ``iter_rows(named=True)``: nested columns through Arrow, which converts
        lists of structs several times faster)."""
        frame = self.base.select(self._columns)[rows]
        values = [
            column.to_arrow().to_pylist() if column.dtype.is_nested() else column.to_list()
            for column in frame.get_columns()
        ]
        return [dict(zip(self._columns, row, strict=True)) for row in zip(*values, strict=True)]

    def printed_scores(self, template) -> PrintedScores | None:
        if template.sha256 not in self.printed:
            self.printed[template.sha256] = PrintedScores.of(template)
        return self.printed[template.sha256]


def _frame(columns: Mapping[str, list], schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """A frame from Python lists, through Arrow (polars' own constructor converts
    every nested list on its own, which costs more than the check)."""
    empty = pl.DataFrame(schema=dict(schema)).to_arrow().schema
    arrays = [pa.array(columns[name], type=empty.field(name).type) for name in schema]
    return pl.from_arrow(pa.Table.from_arrays(arrays, schema=empty))


@dataclass
class _Piece:
    """The verdicts of some of the day's calls, narrow: per call (``rows``) its row, the
    row of its verdict in ``table`` (``_v``, the ``SHARED`` columns), its fidelity and
    re-rendered hash; ``own``: the other per-call columns where they are the check's
    rather than the stored call's (calls checked one by one)."""

    rows: pl.DataFrame
    table: pl.DataFrame
    own: pl.DataFrame | None = None


def _slow_verdicts(checks: list[RotCheck], rows: list[int]) -> _Piece:
    data = {name: [getattr(c, name) for c in checks] for name in VERDICT_FIELDS}
    frame = _frame({"_row": rows, **data}, {"_row": pl.UInt32, **VERDICT_SCHEMA})
    narrow = frame.select("_row", "replay_fidelity", "rerendered_sha256").with_row_index("_v")
    own = frame.select("_row", *(c for c in VERDICT_SCHEMA if c not in SHARED and c not in narrow.columns))
    return _Piece(narrow.select("_row", "_v", "replay_fidelity", "rerendered_sha256"), frame.select(SHARED), own)


def _assembled(base: pl.DataFrame, pieces: list[_Piece], index_snapshot: str | None) -> pl.DataFrame:
    """One verdict row per call, in input order. Only the narrow per-call columns are put
    in order (each call is in exactly one piece, so they cover the day once: a frame of
    another height fails here); the columns a call's verdict shares are gathered once,
    at the end, and the columns copied from the call are the stored call's, in place."""
    offset, rows, tables = 0, [], []
    for piece in pieces:
        rows.append(piece.rows.with_columns(pl.col("_v") + offset))
        tables.append(piece.table.select(SHARED))
        offset += piece.table.height
    narrow = pl.concat(rows).sort("_row")
    table = pl.concat(tables, rechunk=True)  # a gather from one chunk is several times faster
    at = narrow["_v"]
    out = base.select(
        *_OWN,
        recorded_sha256="rendered_request_sha256",
        index_snapshot=pl.lit(index_snapshot, pl.String),
    ).with_columns(
        narrow["replay_fidelity"], narrow["rerendered_sha256"], *(table.get_column(c).gather(at) for c in SHARED)
    )
    for piece in pieces:
        if piece.own is not None and not piece.own.is_empty():
            where = piece.own["_row"]
            out = out.with_columns(out[c].clone().scatter(where, piece.own[c]) for c in piece.own.columns[1:])
    out = out.select(list(VERDICT_SCHEMA))
    return out if out.schema == VERDICT_SCHEMA else out.cast(VERDICT_SCHEMA)


def _with_ids(members: pl.DataFrame, groups: pl.DataFrame, id_name: str, rows: int) -> pl.DataFrame:
    """``members`` with the id of the group each row is in (every row is in exactly
    one), looked up by row position: an array scatter and gather instead of a join."""
    exploded = groups.select(id_name, "_rows").explode("_rows")
    ids = pl.zeros(rows, pl.UInt32, eager=True).scatter(exploded["_rows"], exploded[id_name])
    return members.with_columns(ids.gather(members["_row"]).alias(id_name))


def _system_blocks(block_hashes: pl.Series) -> pl.Series:
    """Each call's recorded ``system`` block (the last one, as the check's block -> hash
    dict keeps it), or null. Ingest writes it second, after the model's, so that position
    is read directly where it holds the only one; the other rows are searched."""
    block = pl.element().struct.field("block")
    frame = block_hashes.to_frame("b")
    second = frame.select(
        at=pl.col("b").list.get(1, null_on_oob=True),
        only=pl.col("b").list.eval(block == "system").list.sum() == 1,
    )
    direct = (second["at"].struct.field("block") == "system").fill_null(False) & second["only"].fill_null(False)
    found = second["at"].alias("_system_block")
    others = (~direct).arg_true()
    if len(others):
        searched = (
            frame[others].select(pl.col("b").list.eval(pl.element().filter(block == "system")).list.last()).to_series()
        )
        found = found.scatter(others, searched)
    return found


# The collector paused for the whole check: it builds tens of thousands of objects that
# all stay alive until it returns (the classes' values and renderings, the run's caches,
# the per-call lists), so the ~40 young collections a day's check triggered found
# nothing to free (the shared pause also moves them to the oldest generation on the way out)
def check_frame(checker: Checker, calls: pl.DataFrame) -> pl.DataFrame:
    """Every call's verdict, as ``checker.check`` gives it, one row per call in input
    order (the columns of ``VERDICT_SCHEMA``); see the module docstring."""
    if calls.is_empty():
        return pl.DataFrame(schema=VERDICT_SCHEMA)
    # one chunk per column (a day read from Delta comes in one per file): the check gathers
    # the classes' and the rotted calls' rows from it several times, and a gather across
    # chunks costs more than putting them together once
    calls = calls.rechunk()
    base = calls.with_row_index("_row").with_columns(_key=_day_set_keys(calls))
    keys = base.select(
        "_row",
        "rendered_request_sha256",
        "_key",
        _fast=_fast_eligible(checker),
        _retained=_full_bytes_retained(),
        _early=_early_missing(checker),
    ).with_columns(_system_block=_system_blocks(base["block_hashes"]))
    fast = keys.filter(pl.col("_fast"))
    early = keys.filter(pl.col("_early").is_not_null())
    slow_rows: list[int] = (
        keys.select(pl.col("_row").filter(~pl.col("_fast") & pl.col("_early").is_null())).to_series().to_list()
    )
    sets = _Sets(checker, base)
    groups = (
        fast.group_by("_key")
        .agg(pl.col("_row").alias("_rows"), pl.col("_row").min().alias("_rep"))
        .sort("_rep")  # in order of first appearance, as maintain_order gives, for less
        .with_row_index("_gid")
    )
    groups = groups.with_columns(
        base.select("template_id", "template_version")[groups["_rep"]],
        # every call of a set records a falsy metadata value or none does (it is in the key)
        _metadata_dropped=metadata_dropped(base["request_json"].gather(groups["_rep"])),
    )
    # from here on only what a call's verdict row needs (each step copies every column it carries)
    fast = _with_ids(
        fast.select(
            "_row",
            "rendered_request_sha256",
            "_retained",
            _system=pl.col("_system_block").struct.field("sha256"),
            _system_algorithm=pl.col("_system_block").struct.field("algorithm"),
        ),
        groups,
        "_gid",
        base.height,
    )
    fast = fast.with_columns(groups["_metadata_dropped"].gather(fast["_gid"]))

    # How each set's system prompt depends on its calls: not at all (plain), through
    # printed scores (slots), or in a way only a full rendering per call shows (slow).
    modes = {}
    static: dict[tuple[str, str], str | None] = {}  # the AST decides once per template version
    for gid, rep, template_id, version in groups.select("_gid", "_rep", "template_id", "template_version").iter_rows():
        if (template_id, version) not in static:
            static[template_id, version] = _static_mode(sets, checker.ingredients.template(template_id, version))
        modes[gid] = static[template_id, version]
        if modes[gid] is None:
            modes[gid] = _mode(sets, sets.calls([rep])[0])
    plain_gids = [g for g, m in modes.items() if m == "plain"]
    slot_gids = [g for g, m in modes.items() if m == "slots"]
    slow_rows += fast.filter(~pl.col("_gid").is_in(plain_gids + slot_gids))["_row"].to_list()

    out = [_early_verdicts(checker, early)] if not early.is_empty() else []
    plain = fast.filter(pl.col("_gid").is_in(plain_gids))
    if not plain.is_empty():
        # the same system prompt for every call of the set: its recorded hash joins the key
        out.append(_spread(sets, plain, ["_gid", "_system", "_system_algorithm"]))
    slots = fast.filter(pl.col("_gid").is_in(slot_gids))
    if not slots.is_empty():
        verdicts, more_slow = _slots(sets, slots, groups.filter(pl.col("_gid").is_in(slot_gids)))
        if verdicts is not None:
            out.append(verdicts)
        slow_rows += more_slow
    if slow_rows:
        slow_rows.sort()
        out.append(_slow_verdicts([checker.check(c) for c in sets.calls(slow_rows)], slow_rows))
    return _assembled(base, out, checker.ingredients.index_snapshot)


def _static_mode(sets: _Sets, template) -> str | None:
    """The mode a template's AST decides, or None when only a rendering can tell."""
    if template is None or not template.uses_documents:
        return "plain"
    if sets.printed_scores(template) is not None:
        return "slots"  # prints scores, and only prints them: filled in per call
    if sets.never_reads_scores(template):
        return "plain"
    return None


def _mode(sets: _Sets, rep: Mapping[str, Any]) -> str:
    """Does rendering this set read a score (then every call renders on its own)?"""
    checker = sets.checker
    template = checker.ingredients.template(rep["template_id"], rep["template_version"])
    docs = _recorded_documents(rep)
    renderer = checker.renderer
    current = [DocRef(d["doc_id"], checker.ingredients.documents.get(d["doc_id"]), d.get("score")) for d in docs]
    present = tuple(d for d in current if d.text is not None)
    as_recorded = tuple(DocRef(d["doc_id"], d.get("text"), d.get("score")) for d in docs)
    variables = rep["template_variables_json"]
    reads = renderer.reads_scores(template, variables, present)
    if not reads and all(d.text is not None for d in as_recorded):
        reads = renderer.reads_scores(template, variables, as_recorded)
    return "slow" if reads else "plain"


def _spread(sets: _Sets, members: pl.DataFrame, class_key: list[str], system_of=None) -> _Piece:
    """Check one call per class, give its verdict to the class, and compute the
    per-call columns. ``system_of`` re-renders the classes whose system prompt
    differs per call (printed scores)."""
    classes = (
        members.group_by(class_key)
        .agg(pl.col("_row").alias("_rows"), pl.col("_row").min().alias("_rep"))
        .sort("_rep")  # in order of first appearance, as maintain_order gives, for less
        .with_row_index("_class")
    )
    members = _with_ids(members, classes, "_class", sets.base.height)
    splices: dict[int, _Splice] | None = None if system_of is not None else {}
    shared, complete, pieces_of, bounds = _class_verdicts(sets, classes["_rep"], splices)
    verdicts = _frame(
        {**shared, "_complete": complete},
        {**{k: VERDICT_SCHEMA[k] for k in SHARED}, "_complete": pl.Boolean},
    )
    # a class's verdict goes to its calls by position (class ids are 0..n-1): a gather
    # per column, not a join, and the wide verdict columns only once, at the end
    at_class = members["_class"]
    verified = (verdicts["status"] == VERIFIED).gather(at_class)
    wanted = ~verified & verdicts["_complete"].gather(at_class)
    # the re-rendered hash: the recorded one where the request reproduced, none where
    # today's request could not be made, else today's blocks around the call's own part
    if system_of is None:
        # the classes with pieces are the ones that did not reproduce and whose request
        # could be made, so the calls hashed are the ones ``wanted`` marks
        rerendered = _RerenderedHashes(sets, members).hashes(pieces_of, bounds, splices)
    else:
        rerendered = pl.Series([None] * members.height, dtype=pl.String)
        if wanted.any():
            needs = members.filter(wanted)
            rows = needs["_row"].to_list()
            texts = sets.base["request_json"].gather(rows).to_list()
            extra = needs.select("_class", *system_of.columns).iter_rows(named=True)
            hashes = pl.Series(
                [
                    system_of.rerendered({**own, "request_json": text}, *pieces_of[own["_class"]])
                    for text, own in zip(texts, extra, strict=True)
                ],
                dtype=pl.String,
            )
            rerendered.scatter(wanted.arg_true(), hashes)
    rows = members.select(
        "_row",
        _v="_class",
        replay_fidelity=pl.when(verified | pl.col("_retained")).then(pl.lit(EXACT)).otherwise(pl.lit(APPROXIMATE)),
        rerendered_sha256=pl.when(verified).then(pl.col("rendered_request_sha256")).otherwise(rerendered),
    )
    return _Piece(rows, verdicts.select(SHARED))


_OWN_KEYS = ("messages", "metadata")


def _parsed(request_json: str) -> dict[str, Any]:
    """``json.loads``, by orjson where it reads the same (it refuses ints over 64 bits)."""
    try:
        return orjson.loads(request_json)
    except orjson.JSONDecodeError:
        return json.loads(request_json)


def _recorded_pieces(request: Mapping[str, Any]) -> dict[str, str]:
    """The recorded top-level values other than the call's own part, as their canonical
    JSON where orjson writes it (a splice checks them against each call's bytes, and
    reads a call whose bytes they do not bound the slow way)."""
    out = {}
    for k, v in request.items():
        if k in _OWN_KEYS or v is None:
            continue
        try:
            out[k] = orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode()
        except (TypeError, orjson.JSONEncodeError):
            out[k] = canonical_json(v)
    return out


# the columns of a class's representative its verdict reads
_REP_COLUMNS = (
    "call_id",
    "template_id",
    "template_version",
    "template_variables_json",
    "service",
    "model_alias",
    "request_json",
    "rendered_request_sha256",
)


def _class_verdicts(
    sets: _Sets,
    reps: pl.Series,
    splices: dict[int, _Splice] | None = None,
) -> tuple[dict[str, list], list[bool], dict[int, tuple[dict[str, str] | None, dict[str, str]]], dict]:
    """The verdict of each class (one call each at ``reps``), as ``Checker.check`` reaches
    it on any of its calls: (the ``SHARED`` columns, whether today's request could be made,
    class -> the recorded and today's pieces where it did not reproduce, class -> today's
    ``around``). With ``splices``, a class whose splice the judge derives gets it there
    and no recorded pieces (None).

    These calls are unredacted and their stored bytes are the canonical JSON the recorded
    hash witnessed (``_fast_eligible``), so the check's own steps are taken once per class
    (``Checker.judge``) on what the class has in common, read column by column: no call
    row is built, and the request does not reproduce exactly when its pieces other than
    the call's own part (its messages and metadata, which come from the record on both
    sides) differ from today's, or it records a falsy metadata value that today's
    request leaves out; its hash is not computed."""
    checker = sets.checker
    base = sets.base
    columns = base.select(_REP_COLUMNS)[reps]
    values = [columns[name].to_list() for name in _REP_COLUMNS]
    # the blocks a verdict compares (the messages' are the record's on both sides), and the
    # documents' fields it reads: converting fewer nested values is most of the cost here
    element = pl.element().struct.field
    gathered = base.select(pl.col("block_hashes", "retrieval").gather(reps))
    nested = gathered.select(
        _blocks=pl.col("block_hashes").list.eval(
            pl.struct(element("block"), element("sha256"), element("algorithm")).filter(
                ~element("block").str.starts_with("messages")
            )
        ),
        _any=pl.col("block_hashes").list.len() > 0,
        _docs=pl.col("retrieval")
        .struct.field("documents")
        .list.eval(pl.struct(element("doc_id"), element("rank"), element("score"), element("text"))),
    )
    hashes = nested["_blocks"].to_arrow().to_pylist()
    documents = nested["_docs"].to_arrow().to_pylist()
    any_blocks = nested["_any"].to_list()
    snapshot = checker.ingredients.index_snapshot
    shared: dict[str, list] = {name: [] for name in SHARED}
    shared_columns = [shared[name] for name in SHARED]
    judge = ClassJudge(checker)
    complete: list[bool] = []
    pieces_of: dict[int, tuple[dict[str, str], dict[str, str]]] = {}
    bounds: dict[int, tuple[str, str]] = {}
    rows = enumerate(zip(*values, hashes, documents, any_blocks, strict=True))
    for class_id, (call_id, template_id, version, variables, service, alias, text, sha, blocks, docs, some) in rows:
        request = _parsed(text)
        if some and not blocks:  # only the messages' blocks: the check reads them as they are
            blocks = base["block_hashes"][reps[class_id]].to_list()
        call = {
            "call_id": call_id,
            "template_id": template_id,
            "template_version": version,
            "template_variables_json": variables,
            "service": service,
            "model_alias": alias,
            "block_hashes": blocks,
            "retrieval": {"documents": docs},
        }
        ranked = _recorded_documents(call)
        if isinstance(request.get("messages"), list):
            fast = judge.judge(template_id, version, variables, service, alias, text, request, blocks, ranked)
            if fast is not None:
                values, today_pieces, today_bounds, recorded_bounds = fast
                for column, value in zip(shared_columns, values, strict=True):
                    column.append(value)
                complete.append(True)
                if values[0] != VERIFIED:
                    if recorded_bounds is not None and splices is not None:
                        # the splice's bounds, without serialising the recorded values again
                        pieces_of[class_id] = (None, today_pieces)
                        splices[class_id] = _Splice(*recorded_bounds, *today_bounds)
                        continue
                    pieces_of[class_id] = (_recorded_pieces(request), today_pieces)
                    if today_bounds is not None:
                        bounds[class_id] = today_bounds
                continue
        result = RotCheck(
            call_id=call_id,
            trace_id=None,
            service=service,
            occurred_date=None,
            status=UNVERIFIABLE,
            recorded_sha256=sha,
            template_id=template_id,
            template_version=version,
            index_snapshot=snapshot,
            model_alias=alias,
        )
        if isinstance(request.get("messages"), list):
            # the messages are the record's on both sides: not serialised again. The stored
            # request is canonical JSON (see the module docstring), so it reproduces exactly
            # when it has today's other keys and reads today's blocks around its own part
            # (``class_verdict.reproduces``); the recorded blocks are not serialised either
            dropped = "metadata" in request and not request["metadata"]
            own = {k: v for k, v in request.items() if k != "messages"}
            keys = {k for k, v in request.items() if k not in _OWN_KEYS and v is not None}

            def reproduces(today: Rerendered, text=text, request=request, keys=keys, dropped=dropped) -> bool:
                pieces = {k: v for k, v in today.pieces.items() if k not in _OWN_KEYS}
                return not dropped and same_request(text, request, keys, pieces)

            today = checker.judge(call, own, ranked, RAW, result, reproduces)
            recorded = None
        else:  # a top-level "messages" that is not a list: the whole request is compared
            today = checker.judge(call, request, ranked, RAW, result)
            recorded = {k: canonical_json(v) for k, v in request.items() if k not in _OWN_KEYS and v is not None}
        for name in SHARED:
            shared[name].append(getattr(result, name))
        made = today is not None and today.complete
        complete.append(made)
        if made and result.status != VERIFIED:
            pieces_of[class_id] = (recorded if recorded is not None else _recorded_pieces(request), today.pieces)
    return shared, complete, pieces_of, bounds


# a class's splice as columns, in ``_Splice``'s order
_AROUND = ("_recorded_prefix", "_recorded_suffix", "_today_prefix", "_today_suffix")


class _RerenderedHashes:
    """For sets whose blocks are the same bytes on every call: sha256 of today's prefix,
    the call's own bytes and today's suffix, per call of ``members`` (``_row``,
    ``_class``, ``_metadata_dropped``, ``rendered_request_sha256``) whose class has pieces;
    null for the others.

    Calls of one class whose stored bytes are the same (a day repeats many requests
    byte for byte) re-render to the same bytes: each distinct request is hashed once,
    spliced and hashed in polars (polars-hash's sha256, the same hex digest as hashlib),
    so no request becomes a Python object."""

    def __init__(self, sets: _Sets, members: pl.DataFrame):
        self._requests = sets.base["request_json"]
        self._height = members.height
        self._members = (
            members.select("_row", "_class", "_metadata_dropped", "rendered_request_sha256")
            .with_row_index("_at")
            .lazy()
        )

    def hashes(
        self,
        pieces_of: Mapping[int, tuple[dict[str, str] | None, dict[str, str]]],
        bounds: Mapping[int, tuple[str, str]],
        splices: Mapping[int, _Splice] | None = None,
    ) -> pl.Series:
        """The hashes of the calls of these classes (class id -> the recorded and today's
        pieces; ``bounds``: today's ``around`` where known; ``splices``: a class's splice
        where the class verdict derived it), in the order of ``members``."""
        out = pl.Series([None] * self._height, dtype=pl.String)
        if not pieces_of:
            return out
        splices = splices or {}
        # per class: the set's recorded bytes around the call's own part, and today's
        ids = sorted(pieces_of)
        arounds: dict[str, list[str | None]] = {name: [] for name in _AROUND}
        for class_id in ids:
            recorded, today = pieces_of[class_id]
            splice = splices.get(class_id)
            if splice is None and recorded is not None:
                splice = _splice(recorded, today, bounds.get(class_id))
            values = (
                (None,) * 4
                if splice is None
                else (splice.prefix, splice.suffix, splice.today_prefix, splice.today_suffix)
            )
            for name, value in zip(_AROUND, values, strict=True):
                arounds[name].append(value)
        # a class's position among the ones with pieces
        local = pl.col("_class").replace_strict(ids, range(len(ids)), return_dtype=pl.UInt32)
        # the stored bytes of these calls hash to their recorded hash (``_fast_eligible``), so
        # calls with one recorded hash hold the same bytes: grouped by it, not by the bytes
        distinct = (
            self._members.filter(pl.col("_class").is_in(ids))
            .group_by("_class", "rendered_request_sha256", "_metadata_dropped")
            .agg("_at", pl.col("_row").first())
            .sort("_row")  # the requests read in the day's order: a gather that walks memory forward
            .with_columns(
                pl.lit(self._requests).gather("_row").alias("_request"),
                *(
                    pl.lit(pl.Series(name, values, pl.String)).gather(local).alias(name)
                    for name, values in arounds.items()
                ),
            )
        )
        # the call's own part lies between the set's recorded prefix and suffix where stripping
        # both takes off both (each is at least a byte long); a falsy metadata value (which
        # today's request leaves out) and a class without a splice go the slow way
        request, prefix, suffix = pl.col("_request"), pl.col("_recorded_prefix"), pl.col("_recorded_suffix")
        own = request.str.strip_prefix(prefix).str.strip_suffix(suffix)
        done = distinct.select(
            "_at",
            "_row",
            "_class",
            pl.when(
                ~pl.col("_metadata_dropped")
                & (own.str.len_bytes() == request.str.len_bytes() - prefix.str.len_bytes() - suffix.str.len_bytes())
            )
            .then(pl.concat_str(pl.col("_today_prefix"), own, pl.col("_today_suffix")).chash.sha2_256())
            .alias("_hash"),
        ).collect()
        hashes = done["_hash"]
        slow = hashes.is_null().arg_true()
        if len(slow):
            texts = self._requests.gather(done["_row"].gather(slow)).to_list()
            classes = done["_class"].gather(slow).to_list()
            by_parsing = [_rerendered_by_parsing(t, pieces_of[c][1]) for t, c in zip(texts, classes, strict=True)]
            hashes = hashes.scatter(slow, pl.Series(by_parsing, dtype=pl.String))
        spread = done.select("_at", _hash=hashes).explode("_at")
        return out.scatter(spread["_at"], spread["_hash"])


_SYSTEM_HOLE = "\x00system\x00"


class _PerCallSystem:
    """The system prompt of each call of a printed-scores set: today's, and the
    recorded one where today's or the as-recorded rendering reproduced its hash."""

    columns = ("_system_today", "_system_recorded")

    def __init__(self) -> None:
        self._splices: dict[int, _Splice | None] = {}

    def rerendered(self, row: Mapping[str, Any], recorded: Mapping[str, str] | None, today: Mapping[str, str]) -> str:
        pieces = {**today, "system": row["_system_today"]}
        recorded_system = row["_system_recorded"]
        if recorded_system is not None and recorded is not None:
            # the set's blocks around a hole for the system prompt, made once per class
            key = row["_class"]
            if key not in self._splices:
                self._splices[key] = _splice({**recorded, "system": _SYSTEM_HOLE}, {**today, "system": _SYSTEM_HOLE})
            splice = self._splices[key]
            if splice is not None:
                splice = _Splice(
                    splice.prefix,
                    splice.suffix.replace(_SYSTEM_HOLE, recorded_system),
                    splice.today_prefix,
                    splice.today_suffix.replace(_SYSTEM_HOLE, row["_system_today"]),
                )
                own = _own_part(row["request_json"], splice)
                if own is not None:
                    return hashlib.sha256((splice.today_prefix + own + splice.today_suffix).encode()).hexdigest()
        return _rerendered_by_parsing(row["request_json"], pieces)


@dataclass
class _SlotSet:
    """One printed-scores set: its skeletons today and as recorded."""

    printed: PrintedScores
    order: tuple[int, ...]  # stored document positions in rank order
    today: Skeleton | None
    present: tuple[int, ...]  # rank positions of the documents still in the index
    recorded: Skeleton | None


def _slot_set(sets: _Sets, rep: Mapping[str, Any]) -> _SlotSet:
    checker = sets.checker
    ingredients = checker.ingredients
    template = ingredients.template(rep["template_id"], rep["template_version"])
    printed = sets.printed_scores(template)
    stored = list((rep.get("retrieval") or {}).get("documents") or [])
    order = tuple(sorted(range(len(stored)), key=lambda i: (stored[i].get("rank") is None, stored[i].get("rank") or 0)))
    docs = [stored[i] for i in order]
    variables = rep["template_variables_json"]
    current = [DocRef(d["doc_id"], ingredients.documents.get(d["doc_id"]), None) for d in docs]
    present = tuple(i for i, d in enumerate(current) if d.text is not None)
    as_recorded = [DocRef(d["doc_id"], d.get("text"), None) for d in docs]
    today = printed.skeleton(variables, [current[i] for i in present], checker.clock)
    recorded = None
    if all(d.text is not None for d in as_recorded):
        recorded = printed.skeleton(variables, as_recorded, checker.clock)
    return _SlotSet(printed, order, today, present, recorded)


def _slots(sets: _Sets, slots: pl.DataFrame, groups: pl.DataFrame) -> tuple[_Piece | None, list[int]]:
    """Sets of a template that prints scores: per call, does today's rendering (and the
    rendering with the recorded document texts) reproduce the recorded system prompt?
    Those two answers join the key."""
    redaction_matches = sets.checker.redaction.matches

    def matches(sha: str, algorithm: str | None, canonical: str) -> bool:
        # plain sha256 directly: these strings differ per call, so caching them buys nothing
        if algorithm in (None, "sha256"):
            return same_block_digest(sha, hashlib.sha256(canonical.encode()).hexdigest())
        return redaction_matches(sha, algorithm, canonical)

    by_gid = {gid: _slot_set(sets, rep) for gid, rep in zip(groups["_gid"], sets.calls(groups["_rep"]), strict=True)}
    scores_of = sets.base.select(
        pl.col("retrieval").struct.field("documents").list.eval(pl.element().struct.field("score"))
    )
    scores_of = scores_of.to_series().gather(slots["_row"]).to_list()
    today_eq, recorded_eq, today_text, recorded_text, bad = [], [], [], [], []
    names = ("_row", "_gid", "_system", "_system_algorithm")
    columns = zip(*(slots[c].to_list() for c in names), scores_of, strict=True)
    for row, gid, sha, algorithm, stored in columns:
        one = by_gid[gid]
        scores = [stored[i] for i in one.order]
        today = again = None
        try:
            if one.today is not None:
                today = one.printed.canonical(one.today, [scores[i] for i in one.present])
            same = today is not None and sha is not None and matches(sha, algorithm, today)
            if not same and sha is not None and one.recorded is not None:
                again = one.printed.canonical(one.recorded, scores)
        except Exception:  # a slot that does not render: the full check says why
            today = None
        if today is None:
            bad.append(row)
            same = False
        again_same = again is not None and matches(sha, algorithm, again)
        today_eq.append(same)
        recorded_eq.append(again_same)
        today_text.append(today)
        recorded_text.append(today if same else (again if again_same else None))
    slots = slots.with_columns(
        _today_eq=pl.Series(today_eq, dtype=pl.Boolean),
        _recorded_eq=pl.Series(recorded_eq, dtype=pl.Boolean),
        _system_today=pl.Series(today_text, dtype=pl.String),
        _system_recorded=pl.Series(recorded_text, dtype=pl.String),
        _system_null=pl.col("_system").is_null(),
    ).filter(~pl.col("_row").is_in(bad))
    if slots.is_empty():
        return None, bad
    key = ["_gid", "_today_eq", "_recorded_eq", "_system_null", "_system_algorithm"]
    return _spread(sets, slots, key, system_of=_PerCallSystem()), bad
