"""Renderings: the selected quotes rendered by the LLM in the asker's language, beside them.

For a Chinese question on an English rulebook the quote stays in English (it is the rule)
and a faithful rendering sits beside it, so the player can check both; the conclusion is
then written from the quotes and their renderings. One sentence per model call: a small
model renders a single sentence well, and mangles several at once (given three rule
sentences and a question in one reply, a small model copies the question as each
rendering). A rendering that states a number its quote does not, says "not" an odd
number of times more or less, drops an "after", "before" or "only" or a component the quote
names (a deck, a tile, the top card …), names a round, a hand or dice the quote does not,
or is not in the asker's language, is not shown.

The rulebook's glossary (rag.reading.glossary) fixes how each of its game terms is
rendered: the terms a sentence uses travel with it, and a rendering that names one of them
otherwise ("martial arts cards" for 武将牌, whose rendering is "general card"), or that leaves
words of the rulebook's Chinese in an English rendering, is not shown either. A rendering
that fails is asked for once more, word for word, with the numbers, negations and terms
spelt out (`strict`); when that fails too, the player gets the sentence word by word from
the glossary (glossing.word_by_word), labelled as no translation, and never a rendering the
checks refused.

Renderings are kept per sentence, so a sentence quoted again is not rendered again: for
the life of the process, and on disk in the Rulekeeper home when a store is given, where
other processes (the local service, API workers) find them too. A rulebook's sentences can
be rendered ahead of time (`rules render`): a question in the other language then waits
for no rendering, only for its conclusion.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from rag.answering.checks import chinese_left, faithful
from rag.answering.glossing import word_by_word
from rag.generation import Generator
from rag.lang import CJK_RE, detect_lang
from rag.prompting import Prompt, fill, phrases, reply_text, system_message
from rag.reading.glossary import (
    Glossary,
    Term,
    other_lang,
    said_otherwise,
    term_pattern,
    term_span,
)
from rag.types import LANGS, Check, Lang, Quote

RENDERING_TOKENS = 200  # a long rule sentence in Chinese, with its terms in brackets
# The reply's field. The model is asked to translate, the word it knows; the prompt and this
# schema name the files renderings are kept in, so a new word would orphan every one made.
RENDERING_FIELD = "translation"
# The reply is held to this shape: asked for plain text under a system prompt that wants JSON,
# a small model wraps its rendering in JSON of its own invention (```json {"翻译": …}).
RENDERING_SCHEMA = {
    "type": "object",
    "properties": {RENDERING_FIELD: {"type": "string"}},
    "required": [RENDERING_FIELD],
}


TERM_TOKENS = 24  # a game term's name
# A term's rendering is a name no longer than the term, not a phrase holding words of its
# context (特殊召唤 is "Special Summon", not "Special summoning from the EX deck"): an
# English word for every two of its characters and one more, three Chinese characters for
# each of its words and one more, and never more than these.
_MOST_TERM_WORDS = 6
_MOST_TERM_CHARACTERS = 10


def rendering_prompt(
    text: str, lang: Lang, terms: Sequence[Term] = (), *, strict: bool = False
) -> Prompt:
    """The task with a worked example, then the sentence as a message of its own (see
    phrases.toml), after the rulebook's terms it uses and their fixed renderings: every
    rendering's prompt is the same up to the sentence, so llama.cpp reads the shared part
    once for a run of renderings. `strict`: the task asked once more when a rendering failed
    its checks, word for word, with each term already rendered in the sentence, where a
    small model copies it rather than rendering it its own way."""
    said = phrases(lang)
    task = "render_strict" if strict else "render"
    listed = "; ".join(f"{t.original} = {t.rendering}" for t in terms if t.rendering)
    shown = _terms_rendered_in(text, terms, other_lang(lang)) if strict else text
    sentence = (
        fill(said["render_with_terms"], task, terms=listed, sentence=shown) if listed else shown
    )
    return _prompt(text, said, task, sentence, RENDERING_TOKENS)


def _terms_rendered_in(text: str, terms: Sequence[Term], book: Lang) -> str:
    """The sentence (in the `book`'s language) with each term in it replaced by its
    rendering."""
    for term in terms:
        if term.rendering:
            # a function, not a template: a rendering's backslashes are its own
            text = term_pattern(term.original, book).sub(_said(f" {term.rendering} "), text)
    return text


def _said(words: str) -> Callable[[re.Match[str]], str]:
    return lambda _: words


def term_prompt(term: Term, lang: Lang) -> Prompt:
    """A game term to render into `lang` once, for the glossary, with the sentence that
    first uses it."""
    said = phrases(lang)
    message = fill(
        said["render_term_message"], "render_term", term=term.original, sentence=term.seen_in
    )
    return _prompt(term.original, said, "render_term", message, TERM_TOKENS)


def _prompt(question: str, said: dict[str, str], task: str, message: str, tokens: int) -> Prompt:
    example = json.dumps({RENDERING_FIELD: said[f"{task}_example_rendering"]}, ensure_ascii=False)
    return Prompt(
        task="render",
        question=question,
        messages=[
            system_message(),
            {"role": "user", "content": f"{fill(said[task], task)}\n\n{said[f'{task}_example']}"},
            {"role": "assistant", "content": example},
            {"role": "user", "content": message},
        ],
        schema=RENDERING_SCHEMA,
        max_tokens=tokens,
    )


class RenderingStore:
    """Renderings on disk, one JSON line each, appended as they are made (an interrupted
    run loses nothing). One file per model and prompt, so one per language rendered into: a
    rendering is what that model made from that prompt, so another model or a changed prompt
    starts afresh. A file another process appended to is read again from where this one
    stopped. `shipped` holds the built-in rulebooks' renderings made ahead by the default
    model, read-only."""

    def __init__(self, folder: Path, model: str, shipped: Path | None = None) -> None:
        self._files = {
            (lang, strict): _RenderingFile(folder, model, lang, shipped, strict)
            for lang in LANGS
            for strict in (False, True)
        }

    def path(self, lang: Lang, *, strict: bool = False) -> Path:
        """The file the renderings into `lang` are appended to."""
        return self._files[(lang, strict)].path

    def get(self, text: str, lang: Lang, *, strict: bool = False) -> str | None:
        return self._files[(lang, strict)].get(text)

    def put(self, text: str, lang: Lang, rendering: str, *, strict: bool = False) -> None:
        self._files[(lang, strict)].put(text, rendering)


class _RenderingFile:
    """The renderings into one language, by one prompt."""

    def __init__(
        self, folder: Path, model: str, lang: Lang, shipped: Path | None, strict: bool
    ) -> None:
        # The prompt a rendering is made from, all but its sentence; hashed in a list of one,
        # as when Chinese was the only language rendered into, so its files keep their names.
        prompt = rendering_prompt("", lang, strict=strict).messages
        fingerprint = hashlib.sha256(json.dumps([[prompt], RENDERING_SCHEMA]).encode()).hexdigest()
        name = f"{re.sub(r'[^A-Za-z0-9.-]+', '_', model)}-{fingerprint[:10]}.jsonl"
        self.lang = lang
        self.path = folder / name
        self._known: dict[str, str] = {}
        self._read_to = 0
        self._unread_shipped = shipped / name if shipped else None
        self._lock = threading.Lock()

    def get(self, text: str) -> str | None:
        with self._lock:
            if self._unread_shipped is not None:
                self._read(self._unread_shipped, 0)
                self._unread_shipped = None
            if text not in self._known:
                self._read_to = self._read(self.path, self._read_to)
            return self._known.get(text)

    def put(self, text: str, rendering: str) -> None:
        line = json.dumps(
            {"lang": self.lang, "text": text, "rendering": rendering}, ensure_ascii=False
        )
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # One write of one line in append mode: lines from several processes never mix.
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, (line + "\n").encode("utf-8"))
            finally:
                os.close(fd)
            self._known[text] = rendering

    def _read(self, path: Path, offset: int) -> int:
        """Read `path`'s whole lines from `offset` on; the offset reached."""
        try:
            with path.open("rb") as lines:
                lines.seek(offset)
                for raw in lines:
                    if not raw.endswith(b"\n"):  # being written: read it next time
                        break
                    offset += len(raw)
                    try:
                        entry = json.loads(raw)
                        if entry["lang"] == self.lang:
                            self._known[entry["text"]] = entry["rendering"]
                    except (ValueError, KeyError, TypeError):
                        continue  # a damaged line costs its rendering, not the store
        except FileNotFoundError:
            pass
        return offset


def _not_shown_because(
    rendered: str, quote: str, lang: Lang, terms: Sequence[Term] = ()
) -> str | None:
    """Why a rendering of `quote` is not shown (None: it is); `terms`, the glossary's terms
    the quote uses, each kept as the glossary renders it."""
    if not rendered:
        return "no rendering"
    # A small model sometimes copies a sentence, or a component line, as it is.
    if detect_lang(rendered) != lang:
        return "not in the question's language"
    if lang == "en" and chinese_left(rendered):
        return "Chinese left in the English"
    changed = said_otherwise(terms, rendered, lang)
    kept = [t for t in terms if t.rendering and t not in changed]
    book = other_lang(lang)
    if not faithful(
        _terms_aside(rendered, kept, lang, rendered=True),
        _terms_aside(quote, kept, book, rendered=False),
    ):
        return "not faithful"
    if changed:
        return (
            "a term not as the glossary renders it ("
            + ", ".join(f"{t.original} = {t.rendering}" for t in changed)
            + ")"
        )
    return None


def _terms_aside(text: str, terms: Sequence[Term], lang: Lang, *, rendered: bool) -> str:
    """The text, in `lang`, without the glossary terms it names: a term's name is no number
    or negation of the rule (幺九刻 counts no 1 or 9, 不求人 says no "not"). `rendered`: the
    text is a rendering, naming each term as the glossary renders it; else it is the quote,
    naming each as the book writes it."""
    for term in terms:
        name = term.rendering if rendered else term.original
        if name and (span := term_span(text, name, lang)):
            text = f"{text[: span[0]]} {text[span[1] :]}"
    return text


@dataclass(frozen=True)
class Rendered:
    """What a sentence's renderings came to: the one that passed the checks (the first
    made, else the one asked for word for word), or why neither did."""

    text: str | None
    why_not: str | None = None  # the last one's failed check, when none passed
    strict: bool = False  # the one that passed was asked for word for word
    made: int = 0  # model calls it took now (0: both were kept from before)


class Renderer:
    """Renders rulebook sentences with the LLM, each once: kept in `store` (on disk, for
    every process) when one is given, else for this process."""

    def __init__(self, generator: Generator, store: RenderingStore | None = None) -> None:
        self.generator = generator
        self.store = store
        self._made: dict[tuple[Lang, bool, str], str] = {}  # without a store
        self._lock = threading.Lock()

    def known(self, text: str, lang: Lang, *, strict: bool = False) -> str | None:
        """The rendering already made of `text`, if any."""
        if self.store is not None:
            return self.store.get(text, lang, strict=strict)
        with self._lock:
            return self._made.get((lang, strict, text))

    def make(
        self, text: str, lang: Lang, terms: Sequence[Term] = (), *, strict: bool = False
    ) -> str:
        """A new rendering of `text`, kept (one not yet made: see `known`)."""
        prompt = rendering_prompt(text, lang, terms, strict=strict)
        rendered, _ = reply_text(self.generator.complete(prompt), RENDERING_FIELD)
        if self.store is not None:
            self.store.put(text, lang, rendered, strict=strict)
        else:
            with self._lock:
                self._made[(lang, strict, text)] = rendered
        return rendered

    def checked(
        self, text: str, lang: Lang, terms: Sequence[Term] = (), *, make: bool = True
    ) -> Rendered:
        """The rendering of `text` that passes the checks: the one made first, else one
        asked for once more word for word; or why neither does. With `make` off, only the
        renderings already made are read: no model call."""
        made, why = 0, None
        for strict in (False, True):
            known = self.known(text, lang, strict=strict)
            if known is None and not make:
                continue
            rendered = known if known is not None else self.make(text, lang, terms, strict=strict)
            made += known is None
            why = _not_shown_because(rendered, text, lang, terms)
            if why is None:
                return Rendered(rendered, strict=strict, made=made)
        return Rendered(None, why, made=made)

    def render_term(self, term: Term, lang: Lang) -> str | None:
        """The glossary's rendering of a game term into `lang`, made by the model (not kept
        here: the glossary keeps it), if it reads as a term's name in `lang`."""
        rendered, _ = reply_text(self.generator.complete(term_prompt(term, lang)), RENDERING_FIELD)
        rendered = rendered.strip(" \t\"'“”「」『』.。")
        if lang == "zh":
            short = len(rendered) <= min(_MOST_TERM_CHARACTERS, 3 * len(term.original.split()) + 1)
        else:
            most = min(_MOST_TERM_WORDS, len(term.original) // 2 + 1)
            short = 1 <= len(rendered.split()) <= most
        fits = (
            bool(rendered)
            and short
            and detect_lang(rendered) == lang
            and (lang == "zh" or not CJK_RE.search(rendered))
            and rendered.casefold() != term.original.casefold()
            and (bool(re.search(r"\d", rendered)) == bool(re.search(r"\d", term.original)))
        )
        return rendered if fits else None

    def render_quotes(
        self,
        quotes: Sequence[Quote],
        lang: Lang,
        glossary: Glossary | None = None,
        *,
        making: Callable[[Quote], bool] | None = None,
    ) -> tuple[list[Quote], Check]:
        """The quotes with the renderings that can be shown: in the asker's language,
        faithful to them, and naming the `glossary`'s terms as it renders them. A quote none
        of whose renderings can be shown gets the glossary's word-by-word line instead, when
        the glossary has words for it. Renderings are made of the quotes `making` accepts
        (all when None); the others get one only if it was made before."""
        shown: list[Quote] = []
        dropped: dict[str, list[str]] = {}  # why a rendering is not shown -> its quotes
        strict: list[str] = []
        for quote in quotes:
            terms = glossary.used_in([quote.text]) if glossary and glossary.into == lang else []
            make = making is None or making(quote)
            rendered = self.checked(quote.text, lang, terms, make=make)
            if not make:  # one made before, or none and nothing said of it
                kept = rendered.text
                shown.append(quote if kept is None else replace(quote, rendering=kept))
                continue
            if rendered.text is not None:
                shown.append(replace(quote, rendering=rendered.text))
                if rendered.strict:
                    strict.append(str(quote.n))
                continue
            gloss = (
                word_by_word(quote.text, glossary) if glossary and glossary.into == lang else None
            )
            shown.append(replace(quote, rendering_withheld=True, word_by_word=gloss))
            dropped.setdefault(rendered.why_not or "no rendering", []).append(str(quote.n))
        details = [f"{why}: quote(s) {', '.join(ns)}" for why, ns in dropped.items()]
        if dropped:
            details[-1] += " (those renderings are not shown)"
        if strict:
            details.append(f"asked again word for word: quote(s) {', '.join(strict)}")
        return shown, Check("rendering", not dropped, "; ".join(details))
