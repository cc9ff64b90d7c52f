"""Translation: the selected quotes rendered in the asker's language, beside the quotes.

For a Chinese question on an English rulebook the quote stays in English (it is the rule)
and a faithful rendering sits beside it, so the player can check both; the conclusion is
then written from the quotes and their renderings. One sentence per model call: a small
model translates a single sentence well, and mangles several at once (given three rule
sentences and a question in one reply, the 1.5B model copied the question as each
"translation"). A rendering that states a number its quote does not, or says "not" an odd
number of times more or less, is not shown. Renderings are kept per sentence for the life
of the process, so a sentence quoted again is not translated again.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace

from rag.answering.checks import faithful
from rag.generation import Generator
from rag.prompting import Prompt, fill, phrases, reply_text, system_message
from rag.types import Check, Lang, Quote

TRANSLATION_TOKENS = 200  # a long rule sentence in Chinese, with its terms in brackets
TRANSLATION_FIELD = "translation"
# The reply is held to this shape: asked for plain text under a system prompt that wants JSON,
# the 1.5B model wrapped its translation in JSON of its own invention (```json {"翻译": …}).
TRANSLATION_SCHEMA = {
    "type": "object",
    "properties": {TRANSLATION_FIELD: {"type": "string"}},
    "required": [TRANSLATION_FIELD],
}


class Translator:
    def __init__(self, generator: Generator) -> None:
        self.generator = generator
        self._done: dict[tuple[Lang, str], str] = {}
        self._lock = threading.Lock()

    def render(self, text: str, lang: Lang) -> str:
        with self._lock:
            known = self._done.get((lang, text))
        if known is not None:
            return known
        task = phrases(lang)["translate"]
        prompt = Prompt(
            task="translate",
            question=text,
            messages=[
                system_message(),
                {"role": "user", "content": fill(task, "translate", sentence=text)},
            ],
            schema=TRANSLATION_SCHEMA,
            max_tokens=TRANSLATION_TOKENS,
        )
        rendered, _ = reply_text(self.generator.complete(prompt), TRANSLATION_FIELD)
        with self._lock:
            self._done[(lang, text)] = rendered
        return rendered

    def translate(self, quotes: Sequence[Quote], lang: Lang) -> tuple[list[Quote], Check]:
        """The quotes with the renderings that are faithful to them."""
        shown: list[Quote] = []
        dropped: list[str] = []
        for quote in quotes:
            rendered = self.render(quote.text, lang)
            if rendered and faithful(rendered, quote.text):
                shown.append(replace(quote, translation=rendered))
            else:
                shown.append(quote)
                dropped.append(str(quote.n))
        detail = f"not faithful to quote(s) {', '.join(dropped)}, not shown" if dropped else ""
        return shown, Check("translation", not dropped, detail)
