"""Corpus loading: the manifests of the built-in and user-added rulebooks, and game lookup.

Each game is a folder holding `manifest.toml` (title, slug, aliases, language, source, file)
and the rulebook file it names.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from rag.errors import CorpusError, GameNotFoundError
from rag.types import GameInfo

MANIFEST = "manifest.toml"
# In a book's folder from before its files are written until its passages are indexed: a
# book still holding it was interrupted (killed mid-build), and is left out until finished.
INCOMPLETE = ".adding"
_SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def slug_of(name: str) -> str:
    """The name's slug, or "" when it has no Latin letter or digit to make one from.

    NFKD first, so that "Café" gives "cafe" and full-width "ＭａｘＡｐｏｃ" gives "maxapoc"."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")


def slugify(title: str) -> str:
    slug = slug_of(title)
    if not slug:
        raise CorpusError(f"Cannot make a slug from {title!r}: give a title with latin letters.")
    return slug


def read_manifest(folder: Path, *, builtin: bool) -> GameInfo:
    path = folder / MANIFEST
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CorpusError(f"Cannot read manifest {path}: {exc}") from exc
    missing = [k for k in ("title", "slug", "language", "file") if k not in data]
    if missing:
        raise CorpusError(f"Manifest {path} lacks {', '.join(missing)}.")
    slug = str(data["slug"])
    if not _SLUG_RE.match(slug):
        raise CorpusError(f"Manifest {path}: slug {slug!r} must be lowercase letters, digits, -.")
    language = data["language"]
    if language not in ("en", "zh"):
        raise CorpusError(f"Manifest {path}: language must be 'en' or 'zh', not {language!r}.")
    return GameInfo(
        slug=slug,
        title=str(data["title"]),
        aliases=tuple(str(a) for a in data.get("aliases", [])),
        language=language,
        source=str(data.get("source", "")),
        path=folder / str(data["file"]),
        builtin=builtin,
    )


def write_manifest(folder: Path, game: GameInfo) -> None:
    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [
        f"title = {q(game.title)}",
        f"slug = {q(game.slug)}",
        "aliases = [" + ", ".join(q(a) for a in game.aliases) + "]",
        f"language = {q(game.language)}",
        f"source = {q(game.source)}",
        f"file = {q(game.path.name)}",
    ]
    (folder / MANIFEST).write_text("\n".join(lines) + "\n", encoding="utf-8")


def _normalise(name: str) -> str:
    """Case-fold and drop spaces and punctuation so 'deck 52' matches 'DECK52'; NFKC first,
    so that full-width letters, as a Chinese input method types them, match too."""
    return re.sub(r"[\s\W_]+", "", unicodedata.normalize("NFKC", name).casefold())


def same_name(a: str, b: str) -> bool:
    """Whether two game names are the same name as lookups compare them."""
    return _normalise(a) == _normalise(b)


def incomplete_note(game: GameInfo) -> str:
    """What to say of a book whose adding was interrupted."""
    return (
        f"Adding {game.title} ({game.slug}) was interrupted before it was indexed, so it is "
        f"left out: finish with `rules index` or `rules remove {game.slug}`."
    )


def is_incomplete(folder: Path) -> bool:
    return (folder / INCOMPLETE).exists()


def mark_incomplete(folder: Path, incomplete: bool = True) -> None:
    marker = folder / INCOMPLETE
    if incomplete:
        marker.touch()
    else:
        marker.unlink(missing_ok=True)


@dataclass(frozen=True)
class Corpus:
    games: tuple[GameInfo, ...]
    # Books whose adding was interrupted before they were indexed: not among the games, so
    # that no command re-embeds them unasked (`with_incomplete` takes them in).
    incomplete: tuple[GameInfo, ...] = ()

    @classmethod
    def load(cls, *folders: tuple[Path, bool]) -> Corpus:
        """Load every game folder under each (root, builtin) pair; slugs must be unique."""
        games: list[GameInfo] = []
        incomplete: list[GameInfo] = []
        seen: dict[str, Path] = {}
        for root, builtin in folders:
            if not root.is_dir():
                continue
            for folder in sorted(p for p in root.iterdir() if (p / MANIFEST).is_file()):
                game = read_manifest(folder, builtin=builtin)
                if game.slug in seen:
                    raise CorpusError(
                        f"Duplicate slug {game.slug!r} in {folder} and {seen[game.slug]}."
                    )
                seen[game.slug] = folder
                (incomplete if is_incomplete(folder) else games).append(game)
        return cls(tuple(games), tuple(incomplete))

    def with_incomplete(self, slugs: Collection[str] | None = None) -> Corpus:
        """This corpus with the interrupted additions among `slugs` (None: all of them)
        counted among the games, in load order."""
        taken = [g for g in self.incomplete if slugs is None or g.slug in slugs]
        games = sorted((*self.games, *taken), key=lambda g: (not g.builtin, g.path.parent.name))
        return Corpus(tuple(games), tuple(g for g in self.incomplete if g not in taken))

    @property
    def slugs(self) -> list[str]:
        return [g.slug for g in self.games]

    def get(self, slug: str) -> GameInfo:
        for game in self.games:
            if game.slug == slug:
                return game
        raise GameNotFoundError(f"No game with slug {slug!r}.", self.slugs)

    def resolve(self, name: str) -> GameInfo:
        """The game a caller named by title, slug or alias (case-insensitive).

        An exact slug wins first: it is unique, so `rules remove SLUG` always works, even
        when another game's title or alias reads the same."""
        by_slug = name.strip().casefold()
        for game in self.games:
            if game.slug == by_slug:
                return game
        wanted = _normalise(name)
        exact = [g for g in self.games if any(_normalise(n) == wanted for n in g.names())]
        if len(exact) == 1:
            return exact[0]
        partial = [
            g for g in self.games if wanted and any(wanted in _normalise(n) for n in g.names())
        ]
        if len(partial) == 1:
            return partial[0]
        if partial:
            names = ", ".join(g.title for g in partial)
            raise GameNotFoundError(f"{name!r} could mean several games ({names}).", self.slugs)
        for game in self.incomplete:
            if by_slug == game.slug or any(_normalise(n) == wanted for n in game.names()):
                raise GameNotFoundError(incomplete_note(game), self.slugs)
        raise GameNotFoundError(f"Unknown game {name!r}.", self.slugs)

    def holder_of(self, name: str) -> tuple[GameInfo, str] | None:
        """The game that already uses `name` (as names are compared), with the name it uses;
        an interrupted addition holds its names too."""
        for game in (*self.games, *self.incomplete):
            for held in game.names():
                if same_name(held, name):
                    return game, held
        return None

    @staticmethod
    def without_names(question: str, game: GameInfo) -> str:
        """The question with the game's names taken out: inside its own rulebook a name says
        nothing, yet it pulls the search towards passages that happen to mention it."""
        names = sorted((n for n in game.names() if _distinctive(n)), key=len, reverse=True)
        pattern = "|".join(re.escape(n) for n in names)
        stripped = " ".join(re.sub(pattern, " ", question, flags=re.IGNORECASE).split())
        return stripped if re.search(r"\w\w", stripped) else question

    def detect(self, question: str) -> GameInfo | None:
        """The game a question names, if exactly one is named; longest name wins overlaps.

        "Maximum" alone names both Maximum games, so it detects nothing.
        """
        text = _normalise(question)
        found: dict[str, int] = {}
        for game in self.games:
            for name in game.names():
                norm = _normalise(name)
                if _distinctive(norm) and norm in text:
                    found[game.slug] = max(found.get(game.slug, 0), len(norm))
        if not found:
            return None
        best = max(found.values())
        winners = [slug for slug, length in found.items() if length == best]
        return self.get(winners[0]) if len(winners) == 1 else None


_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def _distinctive(name: str) -> bool:
    """Whether a game's name is long enough to be looked for inside a question: two Latin
    letters ("MA") fire inside ordinary words, while two Chinese characters (国战) name a
    game as surely as three letters do."""
    name = name.strip()
    return len(name) >= 3 or (len(name) == 2 and all(_HAN.match(c) for c in name))
