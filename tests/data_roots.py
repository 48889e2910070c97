"""Where tests put and find session files: through shared.layout, as the services do."""

from __future__ import annotations

from pathlib import Path

from shared.layout import DataRoot


def session_path(data_dir: Path, session_id: str, name: str) -> Path:
    """Where session ``session_id``'s file ``name`` goes under ``data_dir`` (its shard's folder,
    made if missing); a data root not created yet is created as a writer would (sharded)."""
    root = DataRoot(data_dir)
    if not root.resolve():
        root.create()
    path = root.session_path(session_id, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def session_file(data_dir: Path, session_id: str) -> Path:
    """The path of an existing session's file (SessionNotFoundError when there is none)."""
    return DataRoot(data_dir).locate(session_id)[1]


def session_files(data_dir: Path, pattern: str = "*.jsonl") -> list[Path]:
    """Every file of every shard's sessions folder whose name matches ``pattern``, in name order."""
    root = DataRoot(data_dir)
    if not root.resolve():
        return []
    found: list[Path] = []
    for shard in range(root.shards):
        found += root.sessions_folder(shard).glob(pattern)
    return sorted(found, key=lambda path: path.name)
