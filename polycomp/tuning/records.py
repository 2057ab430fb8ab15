"""Tuning records: every measured trial, kept in sqlite, shared as JSON lines.

Place in the pipeline: around the sampler. Before a search, ``best`` answers "tuned
already?" and ``nearest`` finds the same kernel (same signature, signature.py) tuned at
other sizes, whose best configuration seeds the new search (Sampler(seeds=...), projected
into the new space). After it, ``add_result`` stores every trial.

Key: (signature, sizes, machine, compiler). ``machine`` is the canonical JSON of
signature.machine_identity() without the compiler, ``compiler`` its version line: a
record measured elsewhere is never taken for this machine's. Each row also holds the
configuration (canonical JSON), status, seconds (NULL unless valid), detail, source and
creation time, and a ``uid`` (a digest of all of it) that makes re-imports idempotent.

Concurrency: every operation opens its own connection (sqlite connections do not cross
processes or threads), writes run in ``BEGIN IMMEDIATE`` transactions (the write lock is
taken up front, so two writers queue instead of failing half-way), and the journal is
WAL, so readers never wait for writers. The default path is
``polycomp.build.cache_dir() / "tuning.sqlite"``.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS trials (
    uid       TEXT PRIMARY KEY,
    signature TEXT NOT NULL,
    sizes     TEXT NOT NULL,
    machine   TEXT NOT NULL,
    compiler  TEXT NOT NULL,
    config    TEXT NOT NULL,
    status    TEXT NOT NULL,
    seconds   REAL,
    detail    TEXT NOT NULL DEFAULT '',
    source    TEXT NOT NULL DEFAULT '',
    created   REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS trials_key ON trials (signature, machine, compiler, sizes);
"""
BUSY_TIMEOUT = 60.0  # seconds a writer waits for another's transaction
# the sources of the records of the tuner's re-measurement (api.confirm_result): its
# winner, and the candidates it beat
CONFIRMED = "confirmed"
REMEASURED = "remeasured"


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Record:
    """One trial of one kernel at one size set on one machine with one compiler."""

    signature: str
    sizes: tuple[int, ...]
    config: dict[str, int]
    status: str
    time: float | None
    machine: str
    compiler: str
    detail: str = ""
    source: str = ""
    created: float = field(default_factory=time.time)

    @property
    def uid(self) -> str:
        text = _dumps([self.signature, list(self.sizes), self.machine, self.compiler,
                       self.config, self.status, self.time, self.detail, self.source,
                       self.created])
        return hashlib.sha256(text.encode()).hexdigest()[:40]

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["sizes"] = list(self.sizes)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Record:
        return cls(signature=str(data["signature"]), sizes=tuple(int(s) for s in data["sizes"]),
                   config={str(k): int(v) for k, v in data["config"].items()},
                   status=str(data["status"]),
                   time=None if data.get("time") is None else float(data["time"]),
                   machine=str(data["machine"]), compiler=str(data["compiler"]),
                   detail=str(data.get("detail", "")), source=str(data.get("source", "")),
                   created=float(data.get("created", 0.0)))


def default_path() -> Path:
    from polycomp.build import cache_dir
    return cache_dir() / "tuning.sqlite"


def this_machine() -> tuple[str, str]:
    """(machine, compiler) key parts for the machine this process runs on."""
    from .signature import machine_identity
    ident = dict(machine_identity())
    compiler = str(ident.pop("compiler", ""))
    return _dumps(ident), compiler


class Records:
    """The tuning database at ``path`` (module doc). ``machine`` and ``compiler`` say
    whose records the queries return (default: this machine's)."""

    def __init__(self, path: str | Path | None = None, machine: str | None = None,
                 compiler: str | None = None):
        self.path = Path(path) if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if machine is None or compiler is None:
            here_machine, here_compiler = this_machine()
            machine = here_machine if machine is None else machine
            compiler = here_compiler if compiler is None else compiler
        self.machine, self.compiler = machine, compiler
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # isolation_level=None: transactions are ours (BEGIN IMMEDIATE ... COMMIT)
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)
        try:
            yield db
        finally:
            db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    # ------------------------------------------------------------------ writing
    def record(self, signature: str, sizes: Sequence[int], config: Mapping[str, int],
               status: str, time: float | None = None, detail: str = "",
               source: str = "") -> Record:
        """A Record for this Records' machine and compiler (not stored yet)."""
        return Record(signature, tuple(int(s) for s in sizes),
                      {str(k): int(v) for k, v in config.items()}, status,
                      None if time is None else float(time), self.machine, self.compiler,
                      detail, source)

    def add(self, record: Record) -> bool:
        """Store one record; False when it is there already."""
        return self.add_many([record]) == 1

    def add_many(self, records: Iterable[Record]) -> int:
        """Store records in one transaction; how many were new."""
        rows = [(r.uid, r.signature, _dumps(list(r.sizes)), r.machine, r.compiler,
                 _dumps(r.config), r.status, r.time, r.detail, r.source, r.created)
                for r in records]
        with self._write() as db:
            before = db.total_changes
            db.executemany("INSERT OR IGNORE INTO trials VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
            return db.total_changes - before

    def add_result(self, signature: str, sizes: Sequence[int], result: Any) -> int:
        """Every trial of a sampler.TuneResult, and its re-measured candidates: the
        winner as CONFIRMED (what ``best`` prefers), the others as REMEASURED."""
        rows = [self.record(signature, sizes, t.config, t.status, t.time, t.detail, t.source)
                for t in result.trials]
        rows += [self.record(signature, sizes, config, "valid", seconds, "",
                             CONFIRMED if config == result.best_config else REMEASURED)
                 for config, seconds in getattr(result, "confirmed", ())]
        return self.add_many(rows)

    # ------------------------------------------------------------------ reading
    def _rows(self, where: str, args: Sequence[Any], all_machines: bool = False) -> list[Record]:
        query = ("SELECT signature, sizes, machine, compiler, config, status, seconds, "
                 "detail, source, created FROM trials WHERE " + where)
        if not all_machines:
            query += " AND machine = ? AND compiler = ?"
            args = [*args, self.machine, self.compiler]
        with self._connect() as db:
            rows = db.execute(query + " ORDER BY created, uid", args).fetchall()
        return [Record(sig, tuple(json.loads(sizes)), json.loads(config), status, seconds,
                       machine, compiler, detail, source, created)
                for sig, sizes, machine, compiler, config, status, seconds, detail, source,
                created in rows]

    def trials(self, signature: str, sizes: Sequence[int] | None = None) -> list[Record]:
        """This machine's records of a kernel (at ``sizes``, or at every size)."""
        if sizes is None:
            return self._rows("signature = ?", [signature])
        return self._rows("signature = ? AND sizes = ?", [signature, _dumps(list(sizes))])

    def best(self, signature: str, sizes: Sequence[int]) -> Record | None:
        """The fastest valid record of this kernel at these sizes on this machine;
        among the winners of re-measurements (source CONFIRMED) when there are any: a
        search's single measurements crown the luckiest, a side-by-side re-measurement
        the fastest."""
        return _fastest(self.trials(signature, sizes))

    def nearest(self, signature: str, sizes: Sequence[int]) -> Record | None:
        """The best valid record (as ``best`` picks it) of the same kernel at the
        nearest other sizes (the Euclidean distance between log sizes; same number of
        sizes only)."""
        here = tuple(int(s) for s in sizes)
        by_sizes: dict[tuple[int, ...], list[Record]] = {}
        for r in self.trials(signature):
            if r.sizes != here and len(r.sizes) == len(here):
                by_sizes.setdefault(r.sizes, []).append(r)
        best = [b for rows in by_sizes.values() if (b := _fastest(rows)) is not None]
        if not best:
            return None
        return min(best, key=lambda r: (log_distance(r.sizes, here), r.sizes))

    @staticmethod
    def stamp(path: str | Path) -> str:
        """A text that changes whenever a record is added to the database at ``path``
        ('' when there is none), read without creating it: for cache keys of what was
        compiled with the records."""
        path = Path(path)
        if not path.is_file():
            return ""
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT)
        try:
            count, last = db.execute("SELECT COUNT(*), MAX(created) FROM trials").fetchone()
        finally:
            db.close()
        return f"{path}|{count}|{last!r}"

    def count(self) -> int:
        with self._connect() as db:
            return int(db.execute("SELECT COUNT(*) FROM trials").fetchone()[0])

    # ------------------------------------------------------------------ exchange
    def export_jsonl(self, path: str | Path) -> int:
        """Every record (all machines) as one JSON object a line; how many."""
        records = self._rows("1 = 1", [], all_machines=True)
        with open(path, "w", encoding="utf-8") as f:
            for r in records:
                f.write(_dumps(r.to_json()) + "\n")
        return len(records)

    def import_jsonl(self, path: str | Path) -> int:
        """Records from a JSON-lines file (their own machine and compiler kept); how
        many were new."""
        with open(path, encoding="utf-8") as f:
            records = [Record.from_json(json.loads(line)) for line in f if line.strip()]
        return self.add_many(records)


def _fastest(records: Sequence[Record]) -> Record | None:
    """The fastest valid one, among the re-measurements' winners when there are any
    (Records.best)."""
    valid = [r for r in records if r.status == "valid"]
    valid = [r for r in valid if r.source == CONFIRMED] or valid
    return min(valid, key=lambda r: (r.time, r.created)) if valid else None


def log_distance(a: Sequence[int], b: Sequence[int]) -> float:
    return math.sqrt(sum((math.log(max(x, 1)) - math.log(max(y, 1))) ** 2
                         for x, y in zip(a, b)))
