"""Files kept under one folder up to a size, the least recently used removed first.

Several processes (API workers, the CLI) may share the folder: a file is written under a
temporary name and renamed into place, so none reads half of one, and a file another
process removed first is simply gone.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class FileCache:
    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.folder = folder
        self.max_bytes = max_bytes

    def get(self, name: str) -> Path | None:
        """The kept file, marked as just used; None when it is not kept."""
        path = self.folder / name
        try:
            os.utime(path)
        except FileNotFoundError:
            return None
        return path

    def put(self, name: str, data: bytes) -> Path:
        """Keep the file, then remove the least recently used others past the size limit
        (the new file itself stays, so the caller can use it)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / name
        with tempfile.NamedTemporaryFile(dir=self.folder, prefix=".", delete=False) as out:
            out.write(data)
        os.replace(out.name, path)
        self._evict(keep=path)
        return path

    def _evict(self, keep: Path) -> None:
        kept: list[tuple[float, int, Path]] = []
        for entry in os.scandir(self.folder):
            if entry.name.startswith("."):  # another process's file being written
                continue
            try:
                stat = entry.stat()
            except FileNotFoundError:
                continue
            kept.append((stat.st_mtime, stat.st_size, Path(entry.path)))
        total = sum(size for _, size, _ in kept)
        for _, size, path in sorted(kept):
            if total <= self.max_bytes:
                break
            if path != keep:
                path.unlink(missing_ok=True)
                total -= size
