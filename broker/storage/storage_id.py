"""The data dir's storage identity: a uuid written once, when the directory has none.

A broker registers it in etcd, and each partition's ISR records it for every member
(docs/design/cluster.md, "Storage identities"; Kafka's KIP-858 directory ids). A wiped or
replaced data dir gets a new one, so the controller can tell a replica that came back
without its log from one that kept it, and never elects the first from its ISR entry.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Final

from groupwire.broker.storage.errors import StorageError
from groupwire.broker.storage.fileops import FileOps

STORAGE_ID_FILE: Final = "storage-id"


def load_or_create_storage_id(data_dir: Path, file_ops: FileOps | None = None) -> str:
    """The id in ``data_dir/storage-id``, or a new one written there (fsynced, file and
    directory, whatever the fsync policy: a crash must not hand the same log two ids
    nor an empty dir the old one). Raises :class:`StorageError` if the file cannot be
    read or written, or holds something other than an id."""
    ops = file_ops or FileOps()
    path = Path(data_dir) / STORAGE_ID_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raw = None
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    if raw is not None:
        text = raw.decode("ascii", errors="replace").strip()
        try:
            return str(uuid.UUID(hex=text))
        except ValueError:
            raise StorageError(f"{path} holds no storage id ({text[:40]!r}); removing it "
                               f"gives the directory a new one (its replicas then leave "
                               f"their ISRs and catch up)") from None
    new = str(uuid.uuid4())
    try:
        ops.write_file_atomic(path, new.encode() + b"\n", sync=True)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc}") from exc
    return new
