"""The one pipeline every front end uses: corpus -> index -> retrieval -> generation -> answer.

Models and the index load lazily, on first use, and once; a Pipeline is safe to share
between threads (the index build and each model call are serialised).
"""

from __future__ import annotations

import re
import shutil
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rag.answering.answerer import Answerer
from rag.answering.assembly import not_covered_answer
from rag.answering.candidates import CandidateSelector
from rag.answering.glossing import Glosser
from rag.answering.question import Question
from rag.answering.rendering import RenderingStore
from rag.backends import embedder_for, make_generator
from rag.errors import CorpusError, GameNotFoundError, IngestError, InputError
from rag.follow_ups import follows_up
from rag.generation import ExtractiveGenerator, Generator
from rag.lang import detect_lang, unsupported_language
from rag.prompting import phrases
from rag.reading.chunking import chunk_document
from rag.reading.corpus import (
    MANIFEST,
    Corpus,
    incomplete_note,
    is_incomplete,
    mark_incomplete,
    same_name,
    slug_of,
    write_manifest,
)
from rag.reading.files import SUPPORTED_SUFFIXES, load_document, markdown_folder
from rag.reading.glossary import (
    Glossary,
    draw_up,
    glossary_stamp,
    read_glossary,
    write_glossary,
)
from rag.reading.report import ingest_report, page_count
from rag.searching.embedding import Embedder
from rag.searching.index import DEFAULT_SECONDS_PER_TEXT, ChunkIndex, IndexStore
from rag.searching.reranking import Reranker, make_reranker
from rag.searching.retrieval import Retriever
from rag.searching.sentences import passage_sentences
from rag.settings import MAX_QUESTION_CHARS, Settings, load_settings
from rag.types import (
    Answer,
    Check,
    Chunk,
    Document,
    GameInfo,
    GameSummary,
    Hit,
    IngestReport,
    Lang,
    StreamEvent,
    Timings,
    Turn,
    final_answer,
)

Progress = Callable[[str, int, int], None]  # (stage, done, total)

_NAME_CHAR = re.compile(r"[^\W_]")


@dataclass(frozen=True)
class PlannedBook:
    """A rulebook read and checked for adding, nothing written yet: what indexing it embeds,
    and about how long that takes (at the embedder's rate measured in earlier builds here,
    `measured`, else a first guess)."""

    path: Path
    info: GameInfo  # as it will be kept
    document: Document
    passages: int
    sentences: int
    seconds: float
    measured: bool


@dataclass(frozen=True)
class AddedBook:
    """A rulebook `add_book` added, and what was read from it."""

    game: GameInfo
    report: IngestReport


class Pipeline:
    def __init__(
        self,
        settings: Settings | None = None,
        *,
        embedder: Embedder | None = None,
        generator: Generator | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self.settings = settings or load_settings()
        self._embedder = embedder
        self._generator = generator
        self._reranker = reranker
        self._corpus: Corpus | None = None
        self._retriever: Retriever | None = None
        self._answerer: Answerer | None = None
        self._quoter: Answerer | None = None
        self._wrap: Callable[[Generator], Generator] | None = None
        self._glossaries: dict[str, tuple[int | None, Glossary]] = {}  # with its file's stamp
        self._lock = threading.RLock()

    # --- components, built on first use -------------------------------------------------

    @property
    def corpus(self) -> Corpus:
        with self._lock:
            if self._corpus is None:
                self._corpus = Corpus.load(
                    (self.settings.corpus_dir, True), (self.settings.user_books_dir, False)
                )
            return self._corpus

    @property
    def embedder(self) -> Embedder:
        with self._lock:
            if self._embedder is None:
                self._embedder = embedder_for(self.settings)
            return self._embedder

    @property
    def answerer(self) -> Answerer:
        with self._lock:
            if self._answerer is None:
                self._answerer = self._make_answerer(self.generator)
            return self._answerer

    @property
    def quoter(self) -> Answerer:
        """Answers with the verified rule text alone, running no LLM: what a server whose
        model is saturated can still give."""
        with self._lock:
            if self._quoter is None:
                self._quoter = self._make_answerer(ExtractiveGenerator())
            return self._quoter

    def _make_answerer(self, generator: Generator) -> Answerer:
        gen = self.settings.generation
        candidates = CandidateSelector(
            self.embedder, lambda: self.ensure_index().index.sentence_vectors()
        )
        renderings = (
            RenderingStore(
                self.settings.renderings_dir,
                generator.name,
                shipped=self.settings.corpus_dir / "renderings",
            )
            if generator.writes
            else None
        )
        glosser = Glosser(self.embedder, gen.min_gloss_score)
        return Answerer(candidates, generator, gen, renderings, glosser, glossary_of=self.glossary)

    @property
    def generator(self) -> Generator:
        with self._lock:
            if self._generator is None:
                made = make_generator(self.settings)
                self._generator = self._wrap(made) if self._wrap else made
            return self._generator

    def wrap_generator(self, wrap: Callable[[Generator], Generator]) -> None:
        """Put `wrap` around the generator (now, or when it is made) for every later answer:
        a server wraps it so that a reply it gave up on stops at its next piece."""
        with self._lock:
            self._wrap = wrap
            if self._generator is not None:
                self._generator = wrap(self._generator)
            self._answerer = None
            self._reranker = None

    @property
    def reranker(self) -> Reranker | None:
        with self._lock:
            if self._reranker is None and self.settings.retrieval.rerank:
                self._reranker = make_reranker(self.settings, self.generator)
            return self._reranker

    def index_store(self) -> IndexStore:
        return IndexStore(self.settings.index_dir)

    def ensure_index(self, *, rebuild: bool = False, progress: Progress | None = None) -> Retriever:
        """Load the index, rebuilding it when the corpus or settings changed (or asked to).

        A rebuild reuses the stored vectors of unchanged passages; one asked for embeds all.
        """
        with self._lock:
            if self._retriever is not None and not rebuild:
                return self._retriever
            store = self.index_store()
            if rebuild or not store.is_current(self.corpus, self.settings, self.embedder.name):
                chunks = self._chunk_corpus(progress)
                index = store.build(
                    self.corpus, self.settings, self.embedder, chunks, progress, reuse=not rebuild
                )
            else:
                index = store.load()
            self._retriever = Retriever(index, self.embedder, self.settings.retrieval)
            return self._retriever

    def _chunk_corpus(self, progress: Progress | None) -> list[Chunk]:
        chunks: list[Chunk] = []
        games = self.corpus.games
        for i, game in enumerate(games, start=1):
            chunks.extend(chunk_document(load_document(game.path, game.slug), game))
            if progress:
                progress("chunk", i, len(games))
        return chunks

    # --- corpus views ------------------------------------------------------------------

    def ensure_current(self, progress: Progress | None = None) -> None:
        """Build the index if the rulebooks or settings changed; a current one is not loaded."""
        with self._lock:
            current = self._retriever is not None or self.index_store().is_current(
                self.corpus, self.settings, self.embedder.name
            )
        if not current:
            self.ensure_index(progress=progress)

    def _contents(self) -> ChunkIndex:
        """The indexed chunks, without loading the vectors when they are not loaded yet."""
        with self._lock:
            if self._retriever is not None:
                return self._retriever.index
            store = self.index_store()
            if store.is_current(self.corpus, self.settings, self.embedder.name):
                return store.load_contents()
        return self.ensure_index().index

    def games(self) -> list[GameSummary]:
        contents = self._contents()
        return [GameSummary(g, len(contents.chunks_of(g.slug))) for g in self.corpus.games]

    def chunks(self, game: str) -> list[Chunk]:
        """The rulebook's chunks in reading order (for the viewer: TOC and sections)."""
        slug = self.corpus.resolve(game).slug
        return self._contents().chunks_of(slug)

    def chunk(self, chunk_id: str) -> Chunk:
        found = self._contents().chunk_by_id(chunk_id)
        if found is None:
            raise InputError(f"No passage with id {chunk_id!r}.")
        return found

    def resolve_game(
        self,
        game: str | None,
        question: str,
        history: Sequence[Turn] = (),
        *,
        by_content: bool = True,
    ) -> GameInfo:
        """The caller's game, else the one the question names, else the conversation's
        (the latest turn's game, or the game its question named), else (`by_content`) the
        game whose rulebook is clearly closest to the question."""
        if game:
            return self.corpus.resolve(game)
        detected = self.corpus.detect(question)
        if detected:
            return detected
        for turn in reversed(history):
            earlier = self.corpus.get(turn.game) if turn.game else self.corpus.detect(turn.question)
            if earlier:
                return earlier
        if len(self.corpus.games) == 1:
            return self.corpus.games[0]
        if by_content:
            closest = self.ensure_index().clear_best_game(question, self.corpus.slugs)
            if closest:
                return self.corpus.resolve(closest)
        raise GameNotFoundError(
            "Which game? Name it in the question or choose one (--game, or the game field).",
            self.corpus.slugs,
        )

    def glossary(self, game: str) -> Glossary | None:
        """A game's glossary: kept with a book added here (drawn up, and kept, if it was
        added before glossaries were), drawn up from the headings of a built-in one, whose
        terms have no fixed renderings."""
        with self._lock:
            info = self.corpus.get(game)
            if info is None:
                return None
            # another process (`rules render`) may render its terms while this one runs
            stamp = None if info.builtin else glossary_stamp(info.path.parent)
            cached = self._glossaries.get(info.slug)
            if cached is None or cached[0] != stamp:
                kept = None if info.builtin else read_glossary(info.path.parent)
                if kept is None:
                    kept = draw_up(self._contents().chunks_of(info.slug), info.language)
                    if not info.builtin:
                        write_glossary(info.path.parent, kept)
                        stamp = glossary_stamp(info.path.parent)
                cached = self._glossaries[info.slug] = (stamp, kept)
            return cached[1]

    def render_glossary(self, game: str, progress: Progress | None = None) -> Glossary:
        """Have the model render each term of an added book's glossary that neither the book
        nor an earlier run rendered, once (a term it renders unfit to keep is not asked
        again: a player may write one into the file), and keep them with the book."""
        info = self.corpus.resolve(game)
        glossary = self.glossary(info.slug)
        if glossary is None or info.builtin or not self.generator.writes:
            return glossary or Glossary(info.language)
        renderer = self.answerer.renderer
        todo = glossary.unasked()
        made: dict[str, str | None] = {}
        for done, term in enumerate(todo, start=1):
            made[term.original] = renderer.render_term(term, glossary.into)
            if progress:
                progress("glossary", done, len(todo))
        glossary = glossary.with_renderings(made)
        with self._lock:
            write_glossary(info.path.parent, glossary)
            self._glossaries[info.slug] = (glossary_stamp(info.path.parent), glossary)
        return glossary

    def render_ahead(
        self, lang: Lang, game: str | None = None, progress: Progress | None = None
    ) -> tuple[int, int]:
        """Render every sentence of the rulebooks in another language than `lang` (or of
        `game`'s) into `lang` and keep them on disk, so that questions in `lang` wait for no
        rendering: (sentences rendered now, sentences already kept). An added book's
        glossary terms are rendered first, so that its sentences keep them; a sentence
        whose rendering fails the checks is asked for again word for word, as an answer
        would."""
        if not self.generator.writes:
            raise InputError(
                f"Rendering needs an LLM; the {self.generator.name} backend has none "
                "(generation.backend)."
            )
        texts = self._to_render(lang, game, progress)
        kept = made = 0
        for done, (text, glossary) in enumerate(texts.items(), start=1):
            if self._render_checked(text, lang, glossary):
                made += 1
            else:
                kept += 1
            if progress:
                progress("render", done, len(texts))
        return made, kept

    def time_rendering(self, lang: Lang, game: str, sample: int) -> tuple[int, float | None]:
        """How many sentences of `game`'s rulebook there are to render into `lang`, and the
        seconds one takes, timed on up to `sample` of them spread through the book that are
        not rendered yet (kept like any other; None: all were). One more is rendered first,
        untimed: the model reads the prompt all renderings share once, and a run of
        renderings pays that once, not per sentence."""
        texts = list(self._to_render(lang, game).items())
        todo = [(t, g) for t, g in texts if self.answerer.renderer.known(t, lang) is None]
        spread = todo[:: max(1, len(todo) // (sample + 1))][: sample + 1]
        if spread:
            first, glossary = spread.pop(0)
            self._render_checked(first, lang, glossary)
        started = time.perf_counter()
        timed = sum(bool(self._render_checked(text, lang, g)) for text, g in spread)
        return len(texts), (time.perf_counter() - started) / timed if timed else None

    def _to_render(
        self, lang: Lang, game: str | None, progress: Progress | None = None
    ) -> dict[str, Glossary]:
        """Each sentence of the rulebooks (or `game`'s) in another language than `lang`, once,
        with its book's glossary, whose terms are rendered first."""
        index = self.ensure_index().index
        games = [self.corpus.resolve(game)] if game else self.corpus.games
        texts: dict[str, Glossary] = {}
        for info in games:
            if index.language(info.slug) != lang:
                glossary = self.render_glossary(info.slug, progress)
                for chunk in index.chunks_of(info.slug):
                    for text in index.sentence_vectors().of(chunk.id)[0]:
                        texts.setdefault(text, glossary)
        return texts

    def _render_checked(self, text: str, lang: Lang, glossary: Glossary) -> int:
        """Render a sentence as an answer would (asked again word for word when the first
        rendering fails its checks), keeping the terms of its glossary: the model calls it
        took (0: it was rendered before)."""
        terms = glossary.used_in([text]) if glossary.into == lang else []
        return self.answerer.renderer.checked(text, lang, terms).made

    # --- asking --------------------------------------------------------------------------

    def retrieve(
        self,
        question: str,
        game: str | None = None,
        k: int | None = None,
        history: Sequence[Turn] = (),
    ) -> tuple[GameInfo, list[Hit]]:
        question = _check_question(question)
        info = self.resolve_game(game, question, history)
        earlier = self.follows_from(question, info, history)
        query = Corpus.without_names(
            _with_context(self.book_spelling(question, info), earlier), info
        )
        query = " ".join([query, *self.book_terms(question, info)])
        hits = self.ensure_index().search(
            query, info.slug, k or self.settings.retrieval.k, reranker=self.reranker
        )
        return info, hits

    def book_spelling(self, question: str, info: GameInfo) -> str:
        """A question in the book's language with the terms the book abbreviates spelt as
        the book mostly writes them (EX卡组 for 额外卡组): searched and ranked by that."""
        if detect_lang(question) != info.language:
            return question
        return self.ensure_index().spelling(info.slug).respell(question)

    def book_terms(self, question: str, info: GameInfo) -> tuple[str, ...]:
        """The book's own words for the game terms a question in the other language names,
        as its glossary renders them (大四喜 for "Big Four Winds"): searched for beside the
        question, as a multilingual embedder matches a game's own terms poorly across
        languages."""
        if detect_lang(question) == info.language:
            return ()
        glossary = self.glossary(info.slug)
        return tuple(t.original for t in glossary.named_in(question)) if glossary else ()

    def follows_from(self, question: str, info: GameInfo, history: Sequence[Turn]) -> str | None:
        """The earlier question that `question`, about the game `info`, follows up (it is
        searched and answered beside it), or None for a new topic: a question that does not
        refer back (rag.follow_ups), or one about another game than the last turn's."""
        if not history or not follows_up(question, detect_lang(question)):
            return None
        last = history[-1]
        named = None if last.game else self.corpus.detect(last.question)
        last_game = last.game or (named.slug if named else None)
        return None if last_game not in (None, info.slug) else last.question

    def ask(
        self,
        question: str,
        game: str | None = None,
        k: int | None = None,
        history: Sequence[Turn] = (),
    ) -> Answer:
        return final_answer(self.ask_stream(question, game, k, history))

    def ask_stream(
        self,
        question: str,
        game: str | None = None,
        k: int | None = None,
        history: Sequence[Turn] = (),
        *,
        conclude: bool = True,
    ) -> Iterator[StreamEvent]:
        """The rule text as soon as retrieval is done, the conclusion as it is written, then
        the final answer (see rag.answering). `conclude=False`: the rule text alone, no LLM."""
        started = time.perf_counter()
        question = _check_question(question)
        info, hits = self.retrieve(question, game, k, history)
        lang: Lang = detect_lang(question)  # Japanese and Korean are answered in English
        earlier = self.follows_from(question, info, history)
        retrieve_s = time.perf_counter() - started
        answerer = self.answerer if conclude else self.quoter
        answer: Answer | None = None
        if not self.ensure_index().is_relevant(hits):
            silent = Check("relevance", False, "no passage is close enough to the question")
            answer = not_covered_answer(
                question, info.slug, lang, hits, answerer.generator.name, [silent]
            )
        else:
            asked = Question(
                question.strip(),
                lang,
                info,
                earlier,
                self.book_terms(question, info),
                self.book_spelling(question.strip(), info),
            )
            for event in answerer.stream(asked, hits):
                if event.kind != "answer":
                    yield event
                answer = event.answer or answer
        assert answer is not None  # the answerer always ends with the answer
        if unsupported_language(question):
            answer.answer = f"{phrases(lang)['unsupported_language']}\n\n{answer.answer}"
        answer.follows_up = earlier
        answer.timings = Timings(
            retrieve_s=retrieve_s,
            generate_s=answer.timings.generate_s,
            total_s=time.perf_counter() - started,
        )
        yield StreamEvent("answer", answer=answer)

    # --- user rulebooks ------------------------------------------------------------------

    def add_book(
        self,
        path: Path,
        title: str,
        aliases: Sequence[str] = (),
        progress: Progress | None = None,
    ) -> AddedBook:
        """Copy a user's rulebook (a file, or a folder of Markdown pages) into the corpus and
        index it (embedding its passages alone)."""
        return self.add_planned(self.plan_book(path, title, aliases), progress)

    def plan_book(self, path: Path, title: str, aliases: Sequence[str] = ()) -> PlannedBook:
        """Read and check a rulebook to add, writing nothing: its names, its passages and
        sentences, and about how long embedding them will take."""
        if not path.is_dir() and path.suffix.lower() not in SUPPORTED_SUFFIXES:
            raise IngestError(
                f"{path.name}: unsupported format; use one of {', '.join(SUPPORTED_SUFFIXES)}."
            )
        title, aliases = _names(title, aliases)
        slug = _pick_slug(title, aliases)
        self._refuse_taken(title, aliases, slug)
        document = load_document(path, slug)
        folder = self.settings.user_books_dir / slug
        # A folder of Markdown pages is kept as one Markdown book, a section per page.
        suffix = ".md" if path.is_dir() else path.suffix.lower()
        info = GameInfo(
            slug=slug,
            title=title,
            aliases=tuple(aliases),
            language=detect_lang(document.text),
            source=str(path),
            path=folder / f"rulebook{suffix}",
            builtin=False,
        )
        chunks = chunk_document(document, info)
        sentences = {s for chunk in chunks for s in passage_sentences(chunk.text)}
        rate = self.index_store().seconds_per_text(self.embedder.name)
        # Each sentence is embedded twice: alone, and read under its section's name.
        seconds = (len(chunks) + 2 * len(sentences)) * (rate or DEFAULT_SECONDS_PER_TEXT)
        measured = rate is not None
        return PlannedBook(path, info, document, len(chunks), len(sentences), seconds, measured)

    def add_planned(self, plan: PlannedBook, progress: Progress | None = None) -> AddedBook:
        """Add a planned rulebook; an error or Ctrl-C leaves nothing half-added, and a killed
        process leaves it incomplete (left out until `finish_adding` or `remove_book`)."""
        info = plan.info
        folder = info.path.parent
        if is_incomplete(folder) and not (folder / MANIFEST).is_file():
            shutil.rmtree(folder)  # killed before its manifest was written: never a book
        folder.mkdir(parents=True)
        try:
            mark_incomplete(folder)
            if plan.path.is_dir():
                info.path.write_text(markdown_folder(plan.path), encoding="utf-8")
            else:
                shutil.copyfile(plan.path, info.path)
            write_manifest(folder, info)
            self._reload()
            index = self.finish_adding([info.slug], progress).index
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            self._reload()
            raise
        report = ingest_report(plan.document, index.chunks_of(info.slug), page_count(info.path))
        self.glossary(info.slug)  # drawn up and kept with the book; rendered by render_glossary
        return AddedBook(info, report)

    def finish_adding(
        self, slugs: Collection[str], progress: Progress | None = None, *, rebuild: bool = False
    ) -> Retriever:
        """The index with the interrupted additions `slugs` (see Corpus.incomplete) in it,
        built if need be; once it is, they are added like any other."""
        with self._lock:
            self._corpus = self.corpus.with_incomplete(slugs)
            self._retriever = None
            try:
                retriever = self.ensure_index(rebuild=rebuild, progress=progress)
                for game in self.corpus.games:
                    if game.slug in slugs:
                        mark_incomplete(game.path.parent, incomplete=False)
            finally:
                self._corpus = None
            return retriever

    def _refuse_taken(self, title: str, aliases: Sequence[str], slug: str) -> None:
        """Refuse a name another game already answers to: once two games share one, neither
        can be named by it (lookups would say it "could mean several games")."""
        asked = [("title", title), *(("alias", a) for a in aliases), ("slug", slug)]
        for kind, name in asked:
            found = self.corpus.holder_of(name)
            if found is None:
                continue
            game, held = found
            if game in self.corpus.incomplete:
                raise CorpusError(incomplete_note(game))
            held_as = "slug" if held == game.slug else "title" if held == game.title else "alias"
            change = "title or alias" if kind == "slug" else kind
            raise CorpusError(
                f"The {kind} {name!r} already exists: {game.title} ({game.slug}) has the "
                f"{held_as} {held!r}; choose another {change}."
            )

    def remove_book(self, game: str) -> GameInfo:
        info = self.corpus.with_incomplete().resolve(game)
        if info.builtin:
            raise CorpusError(f"{info.title} is a built-in rulebook; only added books can go.")
        shutil.rmtree(info.path.parent)
        self._reload()
        return info

    def _reload(self) -> None:
        with self._lock:
            self._corpus = None
            self._retriever = None
            self._glossaries.clear()


def _names(title: str, aliases: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """The title and aliases trimmed, each name once; a name with no letter or digit is
    refused: names are compared without punctuation, so it would be no name at all."""
    kept: list[str] = []
    for kind, name in (("title", title), *(("alias", a) for a in aliases)):
        name = name.strip()
        if not _NAME_CHAR.search(name):
            raise InputError(f"The {kind} {name!r} has no letter or digit; give a name.")
        if not any(same_name(name, k) for k in kept):
            kept.append(name)
    return kept[0], tuple(kept[1:])


def _pick_slug(title: str, aliases: Sequence[str]) -> str:
    """The slug from the title, else from the first alias that has Latin letters or digits
    (a Chinese title, such as 三国杀, has none)."""
    for name in (title, *aliases):
        if slug := slug_of(name):
            return slug
    raise CorpusError(
        f"Cannot make a slug (the name commands use) from {title!r}: it has no Latin letters "
        "or digits; add a name that has, with --alias (e.g. --alias sanguosha for 三国杀)."
    )


# Control characters (C0 but tab and newline, DEL, C1) and bidirectional marks, overrides and
# isolates: invisible, they would reach the search, the model's prompt and the echoed
# question, where they can reorder or recolour what a terminal or page shows.
_UNSEEN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# A terminal escape sequence (CSI, such as colour codes): dropped whole, not leaving "[31m".
_ESCAPE_SEQUENCE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def _check_question(question: str) -> str:
    question = _UNSEEN.sub("", _ESCAPE_SEQUENCE.sub("", question)).strip()
    if not question:
        raise InputError("The question is empty: ask something about a game's rules.")
    if len(question) > MAX_QUESTION_CHARS:
        raise InputError(f"The question is longer than {MAX_QUESTION_CHARS} characters.")
    return question


def _with_context(question: str, earlier: str | None) -> str:
    """A follow-up ("and if I'm starving?") searches with the question it follows beside it."""
    return f"{earlier} {question}" if earlier else question
