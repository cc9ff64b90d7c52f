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

Renderings are kept per sentence, so a sentence quoted again is not rendered again: for
the life of the process, and on disk in the Rulekeeper home when a store is given, where
other processes (the local service, API workers) find them too. A rulebook's sentences can
be rendered ahead of time (`rules render`): a Chinese question then waits for no rendering,
only for its conclusion.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rag.answering.checks import faithful
from rag.generation import Generator
from rag.lang import detect_lang
from rag.prompting import Prompt, fill, phrases, reply_text, system_message
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


def rendering_prompt(text: str, lang: Lang) -> Prompt:
    """The task with a worked example, then the sentence as a message of its own (see
    phrases.toml): every rendering's prompt is the same up to the sentence, so llama.cpp
    reads the shared part once for a run of renderings."""
    said = phrases(lang)
    example = json.dumps({RENDERING_FIELD: said["render_example_rendering"]}, ensure_ascii=False)
    return Prompt(
        task="render",
        question=text,
        messages=[
            system_message(),
            {
                "role": "user",
                "content": f"{fill(said['render'], 'render')}\n\n{said['render_example']}",
            },
            {"role": "assistant", "content": example},
            {"role": "user", "content": text},
        ],
        schema=RENDERING_SCHEMA,
        max_tokens=RENDERING_TOKENS,
    )


class RenderingStore:
    """Renderings on disk, one JSON line each, appended as they are made (an interrupted
    run loses nothing). One file per model and prompt, so one per language rendered into: a
    rendering is what that model made from that prompt, so another model or a changed prompt
    starts afresh. A file another process appended to is read again from where this one
    stopped. `shipped` holds the built-in rulebooks' renderings made ahead by the default
    model, read-only."""

    def __init__(self, folder: Path, model: str, shipped: Path | None = None) -> None:
        self._files = {lang: _RenderingFile(folder, model, lang, shipped) for lang in LANGS}

    def path(self, lang: Lang) -> Path:
        """The file the renderings into `lang` are appended to."""
        return self._files[lang].path

    def get(self, text: str, lang: Lang) -> str | None:
        return self._files[lang].get(text)

    def put(self, text: str, lang: Lang, rendering: str) -> None:
        self._files[lang].put(text, rendering)


class _RenderingFile:
    """The renderings into one language."""

    def __init__(self, folder: Path, model: str, lang: Lang, shipped: Path | None) -> None:
        # The prompt a rendering is made from, all but its sentence; hashed in a list of one,
        # as when Chinese was the only language rendered into, so its files keep their names.
        prompt = rendering_prompt("", lang).messages
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


def _not_shown_because(rendered: str, quote: str, lang: Lang) -> str | None:
    """Why a rendering of `quote` is not shown (None: it is)."""
    if not rendered:
        return "no rendering"
    # A small model sometimes copies a sentence, or a component line, as it is.
    if detect_lang(rendered) != lang:
        return "not in the question's language"
    if not faithful(rendered, quote):
        return "not faithful"
    return None


class Renderer:
    """Renders rulebook sentences with the LLM, each once: kept in `store` (on disk, for
    every process) when one is given, else for this process."""

    def __init__(self, generator: Generator, store: RenderingStore | None = None) -> None:
        self.generator = generator
        self.store = store
        self._made: dict[tuple[Lang, str], str] = {}  # without a store
        self._lock = threading.Lock()

    def known(self, text: str, lang: Lang) -> str | None:
        """The rendering already made of `text`, if any."""
        if self.store is not None:
            return self.store.get(text, lang)
        with self._lock:
            return self._made.get((lang, text))

    def render(self, text: str, lang: Lang) -> str:
        known = self.known(text, lang)
        return self.make(text, lang) if known is None else known

    def make(self, text: str, lang: Lang) -> str:
        """A new rendering of `text`, kept (one not yet made: see `known`)."""
        prompt = rendering_prompt(text, lang)
        rendered, _ = reply_text(self.generator.complete(prompt), RENDERING_FIELD)
        if self.store is not None:
            self.store.put(text, lang, rendered)
        else:
            with self._lock:
                self._made[(lang, text)] = rendered
        return rendered

    def render_quotes(self, quotes: Sequence[Quote], lang: Lang) -> tuple[list[Quote], Check]:
        """The quotes with the renderings that can be shown: in the asker's language and
        faithful to them."""
        shown: list[Quote] = []
        dropped: dict[str, list[str]] = {}  # why a rendering is not shown -> its quotes
        for quote in quotes:
            rendered = self.render(quote.text, lang)
            why = _not_shown_because(rendered, quote.text, lang)
            if why is None:
                shown.append(replace(quote, rendering=rendered))
            else:
                shown.append(replace(quote, rendering_withheld=True))
                dropped.setdefault(why, []).append(str(quote.n))
        detail = "; ".join(f"{why}: quote(s) {', '.join(ns)}" for why, ns in dropped.items())
        detail += " (those renderings are not shown)" if dropped else ""
        return shown, Check("rendering", not dropped, detail)
