"""The backup file: gzip-compressed JSON lines, one record a line (:mod:`recall_hub.store.backup_records`).

The first line is the header (format, version, graph, counts), the last the footer: how many records
came before it and the sha256 of their lines. A reader checks all of it — a file cut short, edited,
of another format or of another version is refused with a :class:`BackupFileError` saying why.
The writer writes next to the target and renames at the end, so a file that exists is complete.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from pydantic import ValidationError

from recall_hub.store.backup_records import FORMAT, RECORD, VERSION, Footer, Header, Record


class BackupFileError(ValueError):
    """The file is not a complete, unaltered backup this version can restore."""


class BackupWriter:
    """``with BackupWriter(path) as out: out.write(header); out.write(record); …`` — the footer is added
    and the file moved into place when the block ends without an error; otherwise nothing is left."""

    def __init__(self, path: Path, compresslevel: int = 6) -> None:
        self.path = path
        self._partial = path.with_name(path.name + ".partial")
        self._file = gzip.open(self._partial, "wb", compresslevel=compresslevel)
        self._sha = hashlib.sha256()
        self.records = 0

    def write(self, record: Record) -> None:
        line = record.model_dump_json().encode() + b"\n"
        self._sha.update(line)
        self._file.write(line)
        self.records += 1

    def __enter__(self) -> BackupWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            self._file.write(Footer(records=self.records, sha256=self._sha.hexdigest()).model_dump_json().encode())
            self._file.write(b"\n")
            self._file.close()
            os.replace(self._partial, self.path)
        else:
            self._file.close()
            self._partial.unlink(missing_ok=True)


def read_records(path: Path) -> Iterator[Record]:
    """The records of a backup file, header first, footer excluded. The checksum can only be checked at
    the end: :func:`verify` reads the whole file before anything acts on it."""
    sha = hashlib.sha256()
    count = 0
    footer: Footer | None = None
    try:
        with gzip.open(path, "rb") as file:
            for number, line in enumerate(file, start=1):
                if footer is not None:
                    raise BackupFileError(f"{path}: line {number} follows the end record")
                record = _parse(path, number, line)
                if number == 1 and not isinstance(record, Header):
                    raise BackupFileError(f"{path}: not a Nexus Recall backup (no header)")
                if isinstance(record, Footer):
                    footer = record
                    continue
                if number > 1 and isinstance(record, Header):
                    raise BackupFileError(f"{path}: line {number} is a second header")
                sha.update(line)
                count += 1
                yield record
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise BackupFileError(f"{path}: unreadable or cut short ({exc})") from None
    if footer is None:
        raise BackupFileError(f"{path}: cut short (no end record after {count} record(s))")
    if footer.records != count or footer.sha256 != sha.hexdigest():
        raise BackupFileError(
            f"{path}: checksum mismatch ({count} record(s) read, {footer.records} written): the file was altered"
        )


def verify(path: Path) -> Header:
    """Read the whole file and check it; its header. Raises :class:`BackupFileError`."""
    header: Header | None = None
    for record in read_records(path):
        if header is None:
            assert isinstance(record, Header)
            header = record
    assert header is not None
    return header


def _parse(path: Path, number: int, line: bytes) -> Record:
    if number == 1:
        _check_format(path, line)
    try:
        return RECORD.validate_json(line)
    except ValidationError as exc:
        raise BackupFileError(f"{path}: line {number} is not a backup record: {exc.errors()[0]['msg']}") from None


def _check_format(path: Path, line: bytes) -> None:
    """A clear word for a file of another kind or another version, before validating it as a header."""
    try:
        first = json.loads(line)
    except ValueError:
        raise BackupFileError(f"{path}: not a Nexus Recall backup") from None
    if not isinstance(first, dict) or first.get("format") != FORMAT:
        raise BackupFileError(f"{path}: not a Nexus Recall backup")
    if first.get("version") != VERSION:
        raise BackupFileError(
            f"{path}: backup format version {first.get('version')}; this recall restores version {VERSION}"
        )
