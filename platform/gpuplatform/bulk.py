"""Many rows in one statement: the scheduling cycle's allocations, task and job updates, and the audit
writer's bulk form (audit.record_events). PostgreSQL gets COPY and UPDATE ... FROM unnest(...); other
backends (SQLite, the embedded default) the ORM's bulk_create and grouped update()s. Call inside the
caller's transaction.
"""
from __future__ import annotations

import itertools
import json
from collections import defaultdict
from contextlib import contextmanager

from django.db import IntegrityError, connection
from django.db.models import Field, FloatField, ForeignObject, Func, Lookup

__all__ = ["AnyOf", "CopyRows", "Many", "Pending", "Together", "copy_rows", "insert_batches", "insert_rows", "json_value",
           "lock_keys", "rows", "together", "update_rows"]


class _Epoch(Func):
    """A datetime column as float seconds since the epoch, computed by PostgreSQL (no datetime built)."""

    # date_part gives float8 directly: (microseconds since 2000 - the epoch's, exact in a double) / 1e6, one
    # correctly rounded division, the same double as EXTRACT(EPOCH ...)::float8 (exact numeric, then rounded),
    # without EXTRACT's numeric arithmetic (~0.3 us of server CPU a value: 60,000 times a headline snapshot)
    template = "date_part('epoch', %(expressions)s)"
    output_field = FloatField()


def rows(queryset, fields, times=()) -> list[tuple]:
    """The queryset's rows as plain tuples of `fields` (the scheduling cycle's snapshot read: tens of thousands
    of rows). `times`: the datetime fields among `fields`, returned as float epoch seconds (None stays None).

    On PostgreSQL the queryset's SQL runs on the raw cursor: no per-row Django converters; the server computes
    the epoch seconds (EXTRACT(EPOCH ...)::float8 is the correctly rounded double of the exact microsecond
    value, as datetime.timestamp() is, so both give the same float); JSON columns come back as their text
    (decode with json_value). Elsewhere values_list, with the times converted in Python."""
    if connection.vendor == "postgresql":
        sql, params = _rows_sql(queryset, fields, times)
        with connection.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall()
    out = queryset.values_list(*fields)
    pos = [i for i, f in enumerate(fields) if f in times]
    if not pos:
        return list(out)
    result = []
    for row in out:
        row = list(row)
        for i in pos:
            row[i] = row[i].timestamp() if row[i] is not None else None
        result.append(tuple(row))
    return result


def _rows_sql(queryset, fields, times) -> tuple[str, tuple]:
    names = [f"_epoch_{f}" if f in times else f for f in fields]
    qs = queryset.annotate(**{f"_epoch_{f}": _Epoch(f) for f in times}).values_list(*names)
    return qs.query.sql_with_params()


def rows_many(*reads) -> list[list[tuple]]:
    """`rows` for several reads at once: each read is (queryset, fields) or (queryset, fields, times); returns
    their rows in the same order, each as `rows` returns it (same values, same types).

    On PostgreSQL inside a transaction, the queries go out together in one psycopg pipeline (libpq pipeline
    mode): one round trip for all of them instead of one each, and the server runs the next query while this
    process converts the rows of the one before. Elsewhere (or outside a transaction: pipeline mode's implicit
    transaction would end at its sync) `rows` one read after the other. Errors: a query's error is raised as
    Django's DatabaseError subclass, as by `rows` (the transaction is then aborted)."""
    reads = [(r[0], r[1], r[2] if len(r) > 2 else ()) for r in reads]
    if connection.vendor != "postgresql" or not connection.in_atomic_block:
        return [rows(q, f, t) for q, f, t in reads]
    statements = [_rows_sql(q, f, t) for q, f, t in reads]
    connection.ensure_connection()
    raw = connection.connection
    cursors = [raw.cursor() for _ in statements]
    try:
        with connection.wrap_database_errors, raw.pipeline():  # psycopg's errors as Django's, as `rows` raises them
            for cur, (sql, params) in zip(cursors, statements):
                cur.execute(sql, params, prepare=False)
            return [cur.fetchall() for cur in cursors]
    finally:
        for cur in cursors:
            cur.close()


def json_value(value):
    """A JSON column's value as read by `rows`: the text decoded on PostgreSQL, already decoded elsewhere."""
    return json.loads(value) if isinstance(value, str) else value


_INTEGER_TYPES = {"AutoField", "BigAutoField", "SmallAutoField", "IntegerField", "BigIntegerField", "SmallIntegerField",
                  "PositiveIntegerField", "PositiveBigIntegerField", "PositiveSmallIntegerField"}


@Field.register_lookup
class AnyOf(Lookup):
    """`field__any=values`: the rows whose field is one of `values` (a list), like `__in`, but on PostgreSQL
    as `field = ANY(%s::type[])` with the whole list as ONE array parameter. With `__in` a list of 10,000 ids
    is 10,000 placeholders that psycopg splits and adapts one by one and the server parses and plans one by
    one (the cycle's apply spent ~1 s of client CPU and more of the server's on them); elsewhere `IN (...)`.
    An empty list matches nothing."""

    lookup_name = "any"
    prepare_rhs = False
    can_use_none_as_rhs = False

    def get_prep_lookup(self):
        values = list(self.rhs)
        field = self.lhs.output_field
        try:
            kind = (field.target_field if field.is_relation else field).get_internal_type()
        except Exception:  # noqa: BLE001 - a relation over several columns: no fast path
            kind = ""
        if kind in _INTEGER_TYPES and all(type(v) is int for v in values):
            return values  # ids already ints (the cycle's lists of 10,000-20,000): get_prep_value is the identity
        prep = field.get_prep_value
        return [prep(v) for v in values]

    def as_sql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        values = list(self.rhs)
        if not values:
            return "1 = 0", list(lhs_params)
        if connection.vendor == "postgresql":
            field = self.lhs.output_field
            kind = field.db_type(connection).split("(")[0]
            return f"{lhs} = ANY(%s::{kind}[])", [*lhs_params, _array_param(field, values)]
        return f"{lhs} IN ({', '.join(['%s'] * len(values))})", [*lhs_params, *values]


ForeignObject.register_lookup(AnyOf)  # foreign keys have their own lookup table (job_id__any=...)


class Many:
    """`field__any=Many(values)`: as `field__any=values`, but Django's filter() takes it as it is, where a list or
    tuple is walked value by value looking for expressions (~2 us a value: 0.04 s for the cycle's 20,000 ids)."""

    __slots__ = ("values",)

    def __init__(self, values):
        self.values = values

    def __iter__(self):
        return iter(self.values)


def _field(meta, column: str):
    return meta.get_field(column.removesuffix("_id") if column.endswith("_id") else column)


# How a column's values are written as PostgreSQL text (COPY's text format, array literals), per Django field type.
# A type not listed here takes psycopg's own adaptation (slower, per value).
_TEXT_KINDS = {**{t: "int" for t in _INTEGER_TYPES}, "CharField": "text", "TextField": "text", "SlugField": "text",
               "EmailField": "text", "BooleanField": "bool", "FloatField": "float", "DateTimeField": "datetime",
               "JSONField": "json"}
_COPY_NULL = "\\N"
_COPY_ESCAPE = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _kind(field) -> str:
    """The _TEXT_KINDS kind of a model field (a foreign key: its target's), "" when not listed."""
    try:
        target = field.target_field if field.is_relation else field
    except Exception:  # noqa: BLE001 - a relation over several columns
        return ""
    if getattr(target, "encoder", None) is not None:
        return ""  # a JSONField with its own encoder: psycopg's adaptation
    return _TEXT_KINDS.get(target.get_internal_type(), "")


def _texts(kind: str, values) -> list:
    """Each value as PostgreSQL's text input for a column of `kind` (None stays None): the same value psycopg
    would send, built column-wise (map/str.join at C speed, not one adapter call per value). Datetimes (aware, as
    the platform writes them) as isoformat, memoised per distinct value (a cycle writes one clock thousands of
    times); JSON as json.dumps' text, as psycopg's Jsonb writes it."""
    if kind == "int":
        return [None if v is None else str(int(v)) for v in values]
    if kind == "bool":
        return [None if v is None else "t" if v else "f" for v in values]
    if kind == "float":
        return [None if v is None else repr(float(v)) for v in values]
    if kind == "text":
        return [None if v is None else str(v) for v in values]
    if kind == "json":
        return [None if v is None else json.dumps(v) for v in values]
    if kind == "datetime":
        memo: dict = {None: None}
        out = []
        for v in values:
            text = memo.get(v, memo)
            if text is memo:
                text = memo[v] = v if isinstance(v, str) else v.isoformat()
            out.append(text)
        return out
    raise ValueError(kind)


def _copy_column(kind: str, values) -> list[str]:
    """A column's values as COPY text-format fields: NULL as \\N, backslash, tab, newline and carriage return
    escaped (only text and JSON can hold them: numbers, booleans and isoformat times never do)."""
    texts = _texts(kind, values)
    if kind in ("text", "json"):
        esc = _COPY_ESCAPE
        return [_COPY_NULL if t is None else t.translate(esc) if ("\\" in t or "\t" in t or "\n" in t or "\r" in t)
                else t for t in texts]
    return [_COPY_NULL if t is None else t for t in texts]


COPY_CHUNK_ROWS = 5000  # rows per write: the server parses one chunk while the next is joined


class CopyRows:
    """Rows for insert_rows, formatted ahead of the COPY (copy_rows): the formatting is pure Python and touches no
    database connection, so it may run in another thread while this one waits on the server (store._bind_all)."""

    __slots__ = ("model", "columns", "rows", "chunks")

    def __init__(self, model, columns, rows, chunks):
        self.model, self.columns, self.rows, self.chunks = model, tuple(columns), rows, chunks

    def __len__(self) -> int:
        return len(self.rows)


def copy_rows(model, columns, rows: list[tuple], vendor: str = "postgresql") -> CopyRows:
    """`rows` (tuples in `columns` order) for insert_rows, as COPY's text format when `vendor` is PostgreSQL and every
    column's type is one _TEXT_KINDS lists: column by column (_copy_column), joined in chunks of COPY_CHUNK_ROWS lines.
    Otherwise (chunks None) insert_rows writes the rows as they are (psycopg's write_row, bulk_create elsewhere)."""
    rows = rows if isinstance(rows, list) else list(rows)
    meta = model._meta
    kinds = [_kind(_field(meta, c)) for c in columns]
    if vendor != "postgresql" or not rows or not all(kinds):
        return CopyRows(model, columns, rows, None)
    lines = list(zip(*[_copy_column(k, col) for k, col in zip(kinds, zip(*rows))]))
    chunks = ["".join(["\t".join(line) + "\n" for line in lines[i:i + COPY_CHUNK_ROWS]])
              for i in range(0, len(lines), COPY_CHUNK_ROWS)]
    return CopyRows(model, columns, rows, chunks)


def insert_rows(model, columns, rows) -> None:
    """INSERT many rows (tuples in `columns` order, or a CopyRows from copy_rows): COPY on PostgreSQL (about 5x faster
    than a multi-row INSERT through the ORM for the cycle's allocations and admission events), bulk_create elsewhere.
    A unique-index violation is raised as django.db.IntegrityError, inside the caller's savepoint.

    On PostgreSQL the rows go as COPY's text format built here (copy_rows: column by column, no per-value adapter call)
    in chunks of COPY_CHUNK_ROWS lines; a column of a type _TEXT_KINDS does not list makes the whole call go through
    psycopg's write_row (per row, per value: ~0.3 s of client CPU for the cycle's 40,000 rows)."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        rows = rows.rows if isinstance(rows, CopyRows) else rows
        model.objects.bulk_create([model(**dict(zip(columns, row))) for row in rows], batch_size=2000)
        return
    prepared = rows if isinstance(rows, CopyRows) and rows.chunks is not None else copy_rows(
        model, columns, rows.rows if isinstance(rows, CopyRows) else rows)
    _copy_in(model, columns, (prepared,))


def _copy_in(model, columns, prepared) -> None:
    """One COPY into model's table of every CopyRows of the iterable `prepared`, each written as it comes (its text
    chunks, or psycopg's write_row when it has none). Database errors come as Django's (wrap_database_errors: a
    unique index's is IntegrityError; a lost connection marks it unusable for Django)."""
    meta = model._meta
    fields = [_field(meta, c) for c in columns]
    cols = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    connection.ensure_connection()
    with connection.wrap_database_errors, connection.cursor() as cur:
        with cur.cursor.copy(f"COPY {connection.ops.quote_name(meta.db_table)} ({cols}) FROM STDIN") as copy:
            for rows in prepared:
                if rows.chunks is not None:
                    for chunk in rows.chunks:
                        copy.write(chunk)
                else:
                    _write_rows(copy, fields, rows.rows)


def insert_batches(model, columns, batches) -> int:
    """insert_rows for rows that come in batches (an iterable of lists of tuples in `columns` order), in ONE statement:
    on PostgreSQL one COPY, each batch formatted (copy_rows) and sent as it comes, so the server inserts one batch
    while the caller's iterator builds the next (the scheduling cycle builds its allocation rows so). Elsewhere
    bulk_create per batch. Returns the rows written. Errors as insert_rows' (a unique index's: IntegrityError).
    The iterator must not use the database connection after its first batch (the COPY is open then); its first batch
    is taken before the COPY starts."""
    if connection.vendor != "postgresql":
        written = 0
        for batch in batches:
            insert_rows(model, columns, batch)
            written += len(batch)
        return written
    batches = iter(batches)
    first = next(batches, None)
    if first is None:
        return 0
    written = 0

    def prepared():
        nonlocal written
        for batch in itertools.chain((first,), batches):
            if batch:
                yield copy_rows(model, columns, batch)
                written += len(batch)

    _copy_in(model, columns, prepared())
    return written


def _write_rows(copy, fields, rows) -> None:
    """COPY through psycopg's write_row (any column type), JSON columns wrapped as Jsonb."""
    from psycopg.types.json import Jsonb

    json_at = [i for i, f in enumerate(fields) if f.get_internal_type() == "JSONField"]
    write = copy.write_row
    for row in rows:
        if json_at:
            row = list(row)
            for i in json_at:
                if row[i] is not None:
                    row[i] = Jsonb(row[i])
        write(row)


def update_rows(model, rows: list[tuple], columns: list[str], constants: dict, where: dict | None = None,
                match: tuple[str, ...] = ()) -> int:
    """UPDATE many rows: per row `columns` from rows = [(pk, *values)], `constants` for all, only rows that
    also match `where` ({field: value}, e.g. a compare-and-set on the state). Returns the rows updated.
    `match`: columns compared per row (a per-row compare-and-set, e.g. a task still of the job named): their
    values follow the set columns' in each row, rows = [(pk, *values, *matched)]; a row whose current values differ
    is not updated (nor counted).
    On PostgreSQL one UPDATE ... FROM unnest(array per column) (Django's bulk_update builds CASE WHEN per
    row: 47 s for 10k jobs and 20k tasks; a VALUES list costs seconds in parameter handling); elsewhere
    UPDATE ... FROM (VALUES ...) in chunks on SQLite, one update() per distinct row of values elsewhere."""
    if not rows:
        return 0
    where = where or {}
    match = tuple(match)
    if connection.vendor == "sqlite":
        return _update_rows_sqlite(model, rows, columns, constants, where, match)
    if connection.vendor != "postgresql":
        groups: dict[tuple, list] = defaultdict(list)
        for pk, *values in rows:
            groups[tuple(values)].append(pk)
        updated = 0
        width = len(columns)
        for values, pks in groups.items():
            for i in range(0, len(pks), 500):
                updated += model.objects.filter(pk__in=pks[i:i + 500], **where,
                                                **dict(zip(match, values[width:]))).update(
                    **dict(zip(columns, values[:width])), **constants)
        return updated
    sql, params = _update_sql(model, rows, columns, constants, where, match)
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.rowcount


def _update_sql(model, rows, columns, constants, where, match) -> tuple[str, list]:
    """update_rows' statement on PostgreSQL: (sql, params) of one UPDATE ... FROM unnest(...)."""
    meta = model._meta
    quote = connection.ops.quote_name
    fields = [_field(meta, c) for c in columns]
    const_fields = [(_field(meta, k), v) for k, v in constants.items()]
    ids, *values = [list(col) for col in zip(*rows)]
    matched = [(_field(meta, c), col) for c, col in zip(match, values[len(columns):])]
    values = values[:len(columns)]
    per_row = []  # (field, its values) of the columns whose value differs between rows
    for f, col in zip(fields, values):
        first = col[0]
        if all(v is first or (type(v) is type(first) and v == first) for v in col):
            const_fields.append((f, first))  # one value for every row (a cycle's state, its clock): a constant
        else:
            per_row.append((f, col))
    where_fields = [(_field(meta, k), v) for k, v in where.items()]
    sets = [f"{quote(f.column)} = v.c{i}" for i, (f, _) in enumerate(per_row)]
    sets += [f"{quote(f.column)} = %s" for f, _ in const_fields]
    conditions = "".join(f" AND t.{quote(f.column)} = %s" for f, _ in where_fields)
    conditions += "".join(f" AND t.{quote(f.column)} = v.m{i}" for i, (f, _) in enumerate(matched))
    arrays = ", ".join(f"%s::{t}[]" for t in ["bigint"] + [f.db_type(connection).split("(")[0]
                                                          for f, _ in per_row + matched])
    names = ", ".join(["id"] + [f"c{i}" for i in range(len(per_row))] + [f"m{i}" for i in range(len(matched))])
    params = ([f.get_db_prep_save(v, connection) for f, v in const_fields]
              + [_array_param(meta.pk, ids)] + [_array_param(f, col) for f, col in per_row + matched]
              + [f.get_db_prep_save(v, connection) for f, v in where_fields])
    return (f"UPDATE {quote(meta.db_table)} AS t SET {', '.join(sets)} FROM unnest({arrays}) AS v({names}) "
            f"WHERE t.id = v.id{conditions}", params)


class MissingReference(IntegrityError):
    """lock_keys' refusal: a referenced row does not exist (deleted meanwhile, or never there). An IntegrityError as
    the dropped foreign-key constraint raised, told apart from a unique index's violation (a racing writer)."""


def lock_keys(model, ids, *, also: tuple[str, list] | None = None, what: str = "") -> None:
    """A foreign key's check, for many rows in one statement (migration 0023_e2e9: the scheduling cycle's
    allocations and Events, whose per-row checks cost ~5 us each on the server): every id of `ids` must be the
    primary key of a `model` row (and, with `also` = (column, values), that row's column must equal the value given
    at the same position; then `ids` must be distinct), else MissingReference (an IntegrityError) naming the first
    ids missing (`what`: the referencing column, for the message). On PostgreSQL the rows are locked FOR KEY SHARE, as
    PostgreSQL's own check does: no other transaction can delete them or change their key until the caller's
    transaction ends. Elsewhere (SQLite: one writer at a time) a plain read. Call inside the caller's transaction."""
    ids = list(ids) if also is not None else list(set(ids))
    if not ids:
        return
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute(*_lock_sql(model, ids, also))
            if cur.fetchone()[0] == len(ids):
                return
    _refuse_missing(model, ids, also, what)


def _lock_sql(model, ids: list, also) -> tuple[str, list]:
    """lock_keys' statement on PostgreSQL: the rows locked FOR KEY SHARE, counted."""
    meta = model._meta
    quote = connection.ops.quote_name
    table, pk = quote(meta.db_table), quote(meta.pk.column)
    if also is None:
        return (f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {pk} = ANY(%s::bigint[]) FOR KEY SHARE) s",
                [_int_array(ids)])
    col = quote(_field(meta, also[0]).column)
    return (f"SELECT count(*) FROM (SELECT 1 FROM {table} t JOIN unnest(%s::bigint[], %s::bigint[]) "
            f"AS v(id, c) ON t.{pk} = v.id AND t.{col} = v.c FOR KEY SHARE OF t) s",
            [_int_array(ids), _int_array(also[1])])


def _refuse_missing(model, ids: list, also, what: str) -> None:
    """lock_keys' answer when the count fell short (or without a count: elsewhere than PostgreSQL): MissingReference
    naming the first ids missing."""
    meta = model._meta
    if also is None:
        present = set(model._base_manager.filter(pk__any=Many(ids)).values_list("pk", flat=True))
        missing = sorted(set(ids) - present)
    else:
        present = set(model._base_manager.filter(pk__any=Many(ids)).values_list("pk", also[0]))
        missing = sorted(set(zip(ids, also[1])) - present)
    if missing:
        raise MissingReference(f"{what or meta.db_table}: {len(missing)} reference(s) to no {meta.object_name} row "
                             f"(first {missing[:5]})")


class Together:
    """Writes and reference checks of one transaction sent to PostgreSQL together (`together()`): each call queues
    its statement and returns a Pending; the block's end sends them all in one psycopg pipeline (libpq pipeline mode:
    the server runs them back to back, no round trip and no client work between them), after which each Pending has
    its answer. Elsewhere each call runs at once (the same statement as update_rows / lock_keys). The caller reads the
    answers after the block, in the order it chooses: a lock's refusal (MissingReference) is raised by its `check()`,
    not by the block, so the same error comes first as when the statements ran one by one. An error of a statement
    (a constraint, a lock timeout) is raised by the block, as Django's DatabaseError subclass; the ones queued after it
    are not run (the transaction is aborted: the caller's atomic block rolls back)."""

    def __init__(self):
        self.queued: list = []  # (sql, params, Pending)
        self.pipelined = connection.vendor == "postgresql" and connection.in_atomic_block

    def update_rows(self, model, rows: list[tuple], columns: list[str], constants: dict, where: dict | None = None,
                    match: tuple[str, ...] = ()) -> "Pending":
        """update_rows' statement; its Pending's `value` is the rows updated."""
        pending = Pending()
        if not rows:
            pending.value = 0
        elif self.pipelined:
            self.queued.append((*_update_sql(model, rows, columns, constants, where or {}, tuple(match)), pending))
        else:
            pending.value = update_rows(model, rows, columns, constants, where, match)
        return pending

    def lock_keys(self, model, ids, *, also: tuple[str, list] | None = None, what: str = "") -> "Pending":
        """lock_keys' statement; its Pending's `check()` raises MissingReference as lock_keys would."""
        ids = list(ids) if also is not None else list(set(ids))
        pending = Pending()
        if not ids:
            pending.value = 0
        elif self.pipelined:
            self.queued.append((*_lock_sql(model, ids, also), pending))
        elif connection.vendor == "postgresql":  # outside a transaction: at once, as lock_keys
            with connection.cursor() as cur:
                cur.execute(*_lock_sql(model, ids, also))
                pending.value = cur.fetchone()[0]
        pending.refuse = (model, ids, also, what)
        return pending

    def run(self) -> None:
        if not self.queued:
            return
        connection.ensure_connection()
        raw = connection.connection
        cursors = [raw.cursor() for _ in self.queued]
        try:
            with connection.wrap_database_errors:  # psycopg's errors as Django's, as the one-by-one calls raise them
                with raw.pipeline():
                    for cur, (sql, params, _) in zip(cursors, self.queued):
                        cur.execute(sql, params, prepare=False)
                for cur, (_, _, pending) in zip(cursors, self.queued):
                    pending.value = cur.fetchone()[0] if cur.description is not None else cur.rowcount
        finally:
            for cur in cursors:
                cur.close()
            self.queued = []


class Pending:
    """One statement's answer from Together: `value` (rows updated, or rows locked) once the block has run."""

    __slots__ = ("value", "refuse")

    def __init__(self):
        self.value = None
        self.refuse = None

    def check(self) -> None:
        """For a lock_keys: MissingReference unless every id named was locked (a PostgreSQL count of all of them);
        elsewhere the plain read lock_keys makes."""
        if self.refuse is None:
            return
        model, ids, also, what = self.refuse
        if ids and self.value != len(ids):
            _refuse_missing(model, ids, also, what)


@contextmanager
def together():
    """A Together whose queued statements are sent at the end of the block (see Together). PostgreSQL: inside a
    transaction only (pipeline mode's implicit transaction would end at its sync); outside one, one by one."""
    batch = Together()
    yield batch
    batch.run()


def _int_array(values) -> str:
    """'{1,2,3}': an array literal of integers (none null)."""
    return "{" + ",".join(map(str, map(int, values))) + "}"


def _array_param(field, values):
    """A column's values as one parameter for `%s::type[]`: PostgreSQL's array literal built here (one string) for a
    type _TEXT_KINDS lists, else the list (psycopg adapts it value by value: ~0.2 s of client CPU for the cycle's
    20,000 jobs and tasks)."""
    kind = _kind(field)
    return _array_literal(kind, values) if kind else values


def _array_literal(kind: str, values) -> str:
    """'{...}': PostgreSQL's text input of a one-dimensional array of `values` (None as NULL); text and JSON elements
    double-quoted, backslash and double quote escaped (times too: a time given as text may hold a space); numbers
    and booleans bare (they hold neither a comma, a brace, a quote nor a space)."""
    texts = _texts(kind, values)
    if kind in ("text", "json", "datetime"):
        texts = ["NULL" if t is None else '"' + (t.replace("\\", "\\\\").replace('"', '\\"')
                                                 if ("\\" in t or '"' in t) else t) + '"' for t in texts]
    elif None in texts:
        texts = ["NULL" if t is None else t for t in texts]
    return "{" + ",".join(texts) + "}"


def _update_rows_sqlite(model, rows, columns, constants, where, match=()) -> int:
    """SQLite (3.33+): UPDATE t SET c = v.columnN ... FROM (VALUES (...), ...) AS v WHERE t.id = v.column1,
    in chunks under the 999 host parameters of older builds."""
    meta = model._meta
    quote = connection.ops.quote_name
    matched = [_field(meta, c) for c in match]
    fields = [_field(meta, c) for c in columns] + matched
    const_fields = [(_field(meta, k), v) for k, v in constants.items()]
    where_fields = [(_field(meta, k), v) for k, v in where.items()]
    sets = [f"{quote(f.column)} = v.column{i + 2}" for i, f in enumerate(fields[:len(columns)])]
    sets += [f"{quote(f.column)} = %s" for f, _ in const_fields]
    conditions = "".join(f" AND t.{quote(f.column)} = %s" for f, _ in where_fields)
    conditions += "".join(f" AND t.{quote(f.column)} = v.column{len(columns) + i + 2}" for i, f in enumerate(matched))
    head = [f.get_db_prep_save(v, connection) for f, v in const_fields]
    tail = [f.get_db_prep_save(v, connection) for f, v in where_fields]
    width = len(fields) + 1
    per = max(1, (900 - len(head) - len(tail)) // width)
    updated = 0
    with connection.cursor() as cur:
        for i in range(0, len(rows), per):
            chunk = rows[i:i + per]
            values = ", ".join("(" + ", ".join(["%s"] * width) + ")" for _ in chunk)
            params = list(head)
            for pk, *vals in chunk:
                params.append(pk)
                params += [f.get_db_prep_save(v, connection) for f, v in zip(fields, vals)]
            cur.execute(f"UPDATE {quote(meta.db_table)} AS t SET {', '.join(sets)} FROM (VALUES {values}) AS v "
                        f"WHERE t.id = v.column1{conditions}", params + tail)
            updated += cur.rowcount
    return updated
