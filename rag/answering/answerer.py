"""The answering stages in the order a question flows through them.

passages -> candidates (their sentences, closest to the question first; none close enough,
each read under its section's name: the rulebook is silent) -> quotes (the closest
sentences of the passage that answers best, or of two for some "when can't I" questions,
verbatim) -> deciding (the quoted sentence closest to the question when each is read under
its section's name: shown first, marked, with its chance of settling the question, by a
model fitted on gold evidence, as the confidence that decides whether a conclusion is
shown; the quotes are sent at once) -> selection (with `select` on, the LLM names the
quoted sentences that answer, none meaning the rulebook is silent; off, the deciding
sentence and the next two likeliest) -> rendering (of those, for a question in another
language, keeping the book's glossary terms; one that fails its checks is asked for again
word for word, and when that fails too the glossary's word-by-word line stands beside the
rule instead) -> conclusion (the LLM answers from those quotes alone, shown and streamed
only when the deciding sentence's confidence reaches `conclude_from`, and not asked for at
all below it unless the closest sentence is far enough for a failed one to say the rulebook
is silent; a "when can't I X?" question over a chosen rule allowing X under a condition
gets that condition turned round instead, written by no model: rewording.unless_frame, and
"with N players, how many …?" over a player-count table gets its row: tables.row_answer;
one the model writes the allowed way round, "X only if C", is said as asked,
rewording.turned_round) -> checks -> glosses (in an answer in the other language than the
book's, the book's own word for each of its glossary's terms in brackets after the first of
the renderings' and the conclusion's words for it) -> assembly (the deciding sentence
first, the conclusion only when it passed, the rest of the rule text after; when the
conclusion stated a number no quote holds and the closest sentence is far, or stated
numbers the model does not state again when asked again, under a line saying the rulebook
does not seem to say). A yes/no question gets no selection and no conclusion unless
`answer_yes_no` trusts the model's yes or no. With the extractive backend no model runs:
the quotes are the answer.

`Answerer.stream` runs them in that order: `_found` chooses the sentences before any model
runs (a `Found`), the quotes are sent, and `_written` has the model write the conclusion.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from collections.abc import Generator as Yielding
from dataclasses import dataclass, replace

from rag.answering.assembly import Line, not_covered_answer, quoted_answer, rule_text
from rag.answering.candidates import CandidateSelector, Sentence
from rag.answering.checks import (
    CONCLUSION_CHECKS,
    ConclusionCheck,
    Draft,
    stated_numbers,
    strip_markers,
)
from rag.answering.conclusion import conclusion_prompt, parse_conclusion, stream_conclusion
from rag.answering.deciding import DecidingModel, Judged, judge
from rag.answering.glossing import Glosser
from rag.answering.question import Question
from rag.answering.quotes import make_quotes, quoted_sentences
from rag.answering.rendering import Renderer, RenderingStore
from rag.answering.rewording import allowing_condition, turned_round, unless_frame
from rag.answering.selection import parse_selection, selection_prompt
from rag.answering.tables import row_answer
from rag.generation import Generator
from rag.prompting import Prompt
from rag.reading.glossary import Glossary
from rag.settings import GenerationSettings
from rag.types import Answer, Check, Hit, Lang, Quote, StreamEvent

UNTRUSTED_YES_NO = Check(
    "yes_no", False, "a yes or no from this model is not trusted (generation.answer_yes_no)"
)


@dataclass(frozen=True)
class Found:
    """The sentences an answer is made of, chosen before any model runs."""

    ranked: list[Sentence]  # every sentence of the passages found, closest first
    quoted: list[Sentence]  # those quoted, the rule text
    best: Judged  # the deciding sentence, with its chance of settling the question
    basis: list[Sentence]  # it and the next likeliest quoted: what a conclusion rests on


class Answerer:
    def __init__(
        self,
        candidates: CandidateSelector,
        generator: Generator,
        settings: GenerationSettings,
        renderings: RenderingStore | None = None,
        glosser: Glosser | None = None,
        deciding: DecidingModel | None = None,
        glossary_of: Callable[[str], Glossary | None] | None = None,
        conclusion_checks: Sequence[ConclusionCheck] = CONCLUSION_CHECKS,
    ) -> None:
        self.candidates = candidates
        self.deciding = deciding or DecidingModel.shipped()
        self.generator = generator
        self.renderer = Renderer(generator, renderings)
        self.settings = settings
        self.glosser = glosser
        self.glossary_of = glossary_of  # a game's glossary, by its slug
        self.conclusion_checks = conclusion_checks  # all must pass for it to be shown

    def stream(self, question: Question, hits: list[Hit]) -> Iterator[StreamEvent]:
        """Quotes first, then the conclusion's draft tokens, then the final answer (whose
        `timings.generate_s` is the time spent on the model)."""
        started = time.perf_counter()
        found = self._found(question, hits)
        if isinstance(found, Check):
            yield StreamEvent("answer", answer=self._silent(question, hits, [found]))
            return
        ranked, best = found.ranked, found.best
        quotes, quote_check = make_quotes(found.quoted, best.sentence)
        if not quotes:
            yield StreamEvent("answer", answer=self._silent(question, hits, [quote_check]))
            return
        yield _quotes_event(quotes, question.lang)
        quoted, deciding = found.quoted, found.basis
        if not self.generator.writes:
            answer = self._answer(question, hits, quotes, [quote_check])
            answer.confidence = best.confidence
            yield StreamEvent("answer", answer=answer)
            return
        sure = best.confidence >= self.settings.conclude_from
        concluding = self.settings.answer_yes_no or not question.shape.yes_no
        # Written when it may be shown, or when the closest sentence is far enough for a
        # failing one to say that the rulebook is silent; else no model writes it.
        writing = concluding and (sure or ranked[0].score < self.settings.min_score_unconcluded)
        if not concluding:  # a yes/no the model is not trusted with: nothing to select
            # for, the deciding sentences are rendered
            chosen, selection_check = list(deciding), UNTRUSTED_YES_NO
        elif self.settings.select:
            chosen, selection_check = self._select(question, quoted)
        else:
            chosen, selection_check = list(deciding), self._likeliest_chosen()
        if not chosen:
            answer = self._silent(question, hits, [quote_check, selection_check])
        else:
            basis = _selected(quotes, chosen)
            checks = [quote_check, selection_check]
            if question.lang != chosen[0].hit.chunk.lang:
                # Rendered before the conclusion is written, so that it can restate them: a
                # conclusion composed from the English alone shares too few words with
                # renderings made after it for its negations to be checked. With none to
                # write, a rendering is made only of the deciding sentence, read first (each
                # is a model call); the others get one only if it was made before.
                basis, rendering_check = self.renderer.render_quotes(
                    basis if writing else _selected(quotes, deciding),
                    question.lang,
                    self._glossary(question),
                    making=None if writing else _is_deciding,
                )
                checks.append(rendering_check)
                quotes = _with_renderings(quotes, basis)
                yield _quotes_event(quotes, question.lang)
            frame = writing and unless_frame(question.text, question.lang, deciding[0].text)
            unless = _unless_conclusion(frame, basis, chosen, question.lang) if frame else None
            row = (
                _row_conclusion(question, deciding[0], quotes)
                if writing and unless is None
                else None
            )
            if not concluding:
                _, quotes = self._glossed(question, None, basis, quotes, checks)
                answer = self._answer(question, hits, quotes, checks, "read_the_rule_yes_no")
            elif not writing:  # neither to be shown nor a sign of silence
                checks.append(_unsure(best))
                _, quotes = self._glossed(question, None, basis, quotes, checks)
                answer = self._answer(question, hits, quotes, checks, "read_the_rule")
            elif unless is not None:  # no model call: the rule's own condition, turned round
                conclusion, composed = unless
                checks.append(composed)
                answer = self._concluded(
                    question, hits, quotes, basis, conclusion, checks, ranked[0].score, best
                )
            elif row:  # no model call: the table's row for the players asked about
                conclusion, table = row
                checks.append(Check("table", True, f"quote {table.n}'s row for the players asked"))
                answer = self._concluded(
                    question,
                    hits,
                    quotes,
                    [table],
                    conclusion,
                    checks,
                    ranked[0].score,
                    best,
                    copied=True,
                )
            else:
                answer = yield from self._written(question, hits, found, quotes, basis, checks)
        answer.timings.generate_s = time.perf_counter() - started
        answer.confidence = best.confidence
        yield StreamEvent("answer", answer=answer)

    def _written(
        self,
        question: Question,
        hits: list[Hit],
        found: Found,
        quotes: list[Quote],
        basis: list[Quote],
        checks: list[Check],
    ) -> Yielding[StreamEvent, None, Answer]:
        """The answer concluded by the model from `basis`, its draft streamed as it is
        written when it may be shown."""
        reply: list[str] = []
        prompt = conclusion_prompt(
            question.text,
            question.lang,
            basis,
            game_title=question.game.title,
            earlier_question=question.earlier,
            closest_rule=found.basis[0].text,
        )
        sure = found.best.confidence >= self.settings.conclude_from
        for text in stream_conclusion(self.generator.stream(prompt), reply):
            if sure:  # a draft that cannot be shown is not streamed either
                yield StreamEvent("token", text=text)
        written = parse_conclusion("".join(reply), question.text, question.lang)
        # A conclusion written the allowed way round is said as asked.
        if question.shape.when_not_allowed:
            as_asked = turned_round(written, question.lang)
            if as_asked is not None:
                written = as_asked
                checks.append(Check("unless", True, "the conclusion, turned round"))
        return self._concluded(
            question,
            hits,
            quotes,
            basis,
            written,
            checks,
            found.ranked[0].score,
            found.best,
            asked=prompt,
        )

    def _found(self, question: Question, hits: list[Hit]) -> Found | Check:
        """The sentences an answer is made of, chosen before any model runs; or the check
        saying that none answers."""
        ranked = self.candidates.rank(question.searched, hits[: self.settings.passages])
        # Read under its section's name, a sentence says what it is about ("Roll two dice."
        # under "Stealth"): the gate reads that closeness, as the deciding sentence is chosen.
        scores = self.candidates.titled_scores(question.searched, ranked)
        titled = {_place(s): score for s, score in zip(ranked, scores, strict=True)}
        closest = max(titled.values(), default=1.0)
        if closest < self.settings.min_sentence_score:
            return Check(
                "closeness",
                False,
                f"the closest sentence read under its section's name scores {closest:.2f}, "
                f"under {self.settings.min_sentence_score:.2f}: no sentence answers the question",
            )
        judged = judge(ranked, self.deciding)
        if not judged:
            return Check("quotes", False, "the passages found have no sentence to quote")
        quoted = quoted_sentences(question.shape, ranked, self.settings.quotes, titled=scores)
        # The deciding sentence is the closest of those quoted read under its section's name,
        # the rest of its passage its context: one from another passage would cite a passage
        # more, as often wrong. Its confidence is its plain closeness's calibrated chance.
        first = max(quoted, key=lambda s: titled[_place(s)], default=ranked[0])
        best = next(j for j in judged if j.sentence == first)
        # The conclusion rests on the deciding sentence and the next likeliest quoted ones.
        likeliest = [j.sentence for j in judged if j.sentence in quoted and j is not best]
        return Found(
            ranked=ranked,
            quoted=quoted or [best.sentence],
            best=best,
            basis=[best.sentence, *likeliest[: self.settings.basis - 1]],
        )

    def _select(
        self, question: Question, deciding: Sequence[Sentence]
    ) -> tuple[list[Sentence], Check]:
        """The quoted sentences the conclusion rests on, chosen by the LLM."""
        prompt = selection_prompt(
            question.text,
            question.lang,
            deciding,
            game_title=question.game.title,
            most=self.settings.basis,
            earlier_question=question.earlier,
        )
        ids = parse_selection(self.generator.complete(prompt), len(deciding), self.settings.basis)
        if ids is None:
            return list(deciding[: self.settings.basis]), Check(
                "selection", False, "reply named no sentence; the closest are concluded from"
            )
        if not ids:
            return [], Check("selection", True, "no candidate sentence answers the question")
        return [deciding[i - 1] for i in ids], Check("selection", True, f"sentences {ids}")

    def _likeliest_chosen(self) -> Check:
        """The check saying the conclusion rests on the likeliest quoted sentences."""
        return Check(
            "selection",
            True,
            f"the {self.settings.basis} quoted sentences likeliest to decide "
            "(generation.select is off)",
        )

    def _concluded(
        self,
        question: Question,
        hits: list[Hit],
        quotes: list[Quote],
        basis: list[Quote],
        written: str,
        checks: list[Check],
        closest: float,
        deciding: Judged,
        *,
        copied: bool = False,
        asked: Prompt | None = None,
    ) -> Answer:
        """The answer showing `quotes`, concluded from `basis` (the selected ones) when the
        conclusion `written` passes the checks against them and the `deciding` sentence's
        confidence reaches `conclude_from`. Written either way, a conclusion that fails the
        checks still tells whether the rulebook seems silent: when it fails, the rulebook
        seems silent if the closest sentence (`closest`, its score) is not close either, or
        if the model, `asked` again, does not repeat the numbers it stated. A conclusion
        `copied` from a quote's cells states no negation, and no word of its own, for those
        checks to read."""
        conclusion, marker_check = strip_markers(written, [q.n for q in basis])
        checks.append(marker_check)
        if conclusion:
            draft = Draft(conclusion, basis, question, copied)
            checks += [check.judge(draft) for check in self.conclusion_checks]
        else:
            checks.append(Check("conclusion", False, "the reply held no conclusion"))
        passed = bool(conclusion) and all(
            c.passed for c in checks if c.name not in ("quotes", "selection", "rendering")
        )
        sure = deciding.confidence >= self.settings.conclude_from
        if passed and not sure:
            checks.append(_unsure(deciding))
        shown = passed and sure
        # Two signals of silence together: the conclusion stated a number no quote holds (the
        # quotes lack what was asked), and the closest sentence is far. A conclusion failing
        # otherwise, such as reading a negation the wrong way round, most often misread a
        # rule that is there, so it does not make the rulebook silent.
        invented = any(c.name == "numbers" and not c.passed for c in checks)
        silence = None
        if not passed and invented and closest < self.settings.min_score_unconcluded:
            silence = Check(
                "closeness",
                False,
                f"the conclusion stated a number no quote holds, and the closest "
                f"sentence scores {closest:.2f}, "
                f"under {self.settings.min_score_unconcluded:.2f}: the rulebook does not "
                "seem to answer the question",
            )
        elif not passed and asked is not None:
            silence = self._numbers_unrepeated(question, conclusion, asked)
        shown_conclusion, quotes = self._glossed(
            question, conclusion if shown else None, basis, quotes, checks
        )
        if silence is not None:
            checks.append(silence)
        return quoted_answer(
            question.text,
            question.game.slug,
            question.lang,
            quotes=quotes,
            conclusion=shown_conclusion,
            checks=checks,
            hits=hits,
            backend=self.generator.name,
            line=None if shown else "not_answered" if silence else "read_the_rule",
        )

    def _numbers_unrepeated(
        self, question: Question, conclusion: str, asked: Prompt
    ) -> Check | None:
        """A failing check if the model, asked for the conclusion again (up to `reasks` times,
        hotter, each with a seed of its own), never states the numbers of `conclusion` again:
        numbers it makes up vary from one asking to the next, numbers a rule gives do not.
        None if it repeats them, or states none."""
        said = stated_numbers(conclusion, one_words=False)
        if not said or not self.settings.reasks:
            return None
        for seed in range(1, self.settings.reasks + 1):
            again = replace(asked, temperature=self.settings.reask_temperature, seed=seed)
            reply = parse_conclusion(self.generator.complete(again), question.text, question.lang)
            if stated_numbers(reply, one_words=False) == said:
                return None
        numbers = ", ".join(map(str, sorted(said)))
        return Check(
            "numbers_repeated",
            False,
            f"asked {self.settings.reasks} times more, the model stated {numbers} in none of "
            "its conclusions: the rulebook does not seem to answer the question",
        )

    def _glossary(self, question: Question) -> Glossary | None:
        return self.glossary_of(question.game.slug) if self.glossary_of else None

    def _glossed(
        self,
        question: Question,
        conclusion: str | None,
        basis: Sequence[Quote],
        quotes: Sequence[Quote],
        checks: list[Check],
    ) -> tuple[str | None, list[Quote]]:
        """For an answer in the other language than the book's, the conclusion shown (if
        any) and the renderings beside the quotes with the book's own word for each of its
        terms in brackets the first time each is named, in the order they are read (the
        deciding sentence's rendering, the conclusion, the others); the check saying which
        is added to `checks`."""
        glossary = self._glossary(question)
        rendered = [q for q in quotes if q.rendering]
        if (
            glossary is None
            or glossary.into != question.lang
            or self.glosser is None
            or not (conclusion or rendered)
        ):
            return conclusion, list(quotes)
        first = [q for q in rendered if q.deciding]
        rest = [q for q in rendered if not q.deciding]
        read = [
            *((q.rendering or "", [q.text]) for q in first),
            *([(conclusion, [q.text for q in basis])] if conclusion else []),
            *((q.rendering or "", [q.text]) for q in rest),
        ]
        glossed, check = self.glosser.gloss(
            [text for text, _ in read], [own for _, own in read], glossary
        )
        checks.append(check)
        if conclusion:
            conclusion = glossed[len(first)]
        after = len(first) + bool(conclusion)
        by_quote = dict(
            zip(map(id, first + rest), glossed[: len(first)] + glossed[after:], strict=True)
        )
        return conclusion, [replace(q, rendering=by_quote.get(id(q), q.rendering)) for q in quotes]

    def _answer(
        self,
        question: Question,
        hits: list[Hit],
        quotes: list[Quote],
        checks: list[Check],
        line: Line | None = None,
    ) -> Answer:
        """The quotes without a conclusion, none having been asked for: the answer itself
        (no model), or the rule the player is told to read (`line`): one that decides a yes
        or no the model is not trusted to give (`read_the_rule_yes_no`), or one no
        conclusion was sure enough to be shown beside (`read_the_rule`)."""
        return quoted_answer(
            question.text,
            question.game.slug,
            question.lang,
            quotes=quotes,
            conclusion=None,
            checks=checks,
            hits=hits,
            backend=self.generator.name,
            line=line,
        )

    def _silent(self, question: Question, hits: list[Hit], checks: list[Check]) -> Answer:
        return not_covered_answer(
            question.text, question.game.slug, question.lang, hits, self.generator.name, checks
        )


def _unsure(best: Judged) -> Check:
    """The check saying the deciding sentence is not sure enough to write a conclusion."""
    return Check(
        "deciding",
        False,
        f"the deciding sentence's confidence {best.confidence:.2f} is under "
        "generation.conclude_from: it is the answer, with no conclusion",
    )


def _unless_conclusion(
    frame: str, basis: Sequence[Quote], chosen: Sequence[Sentence], lang: Lang
) -> tuple[str, Check] | None:
    """The unless `frame` filled with the condition of the closest chosen rule that allows
    the thing under one (in the asker's language: its kept rendering, if it has one), and
    the check saying so; None when no chosen rule is shaped that way."""
    for sentence in chosen:  # closest first
        quote = _quote_of(sentence, basis)
        if quote is None:
            continue
        rule = quote.text if sentence.hit.chunk.lang == lang else quote.rendering
        condition = allowing_condition(rule, lang) if rule else None
        if condition:
            composed = Check("unless", True, f"quote {quote.n}'s condition, turned round")
            return frame.replace("{condition}", condition), composed
    return None


def _row_conclusion(
    question: Question, closest: Sentence, quotes: Sequence[Quote]
) -> tuple[str, Quote] | None:
    """The answer read off the closest quoted sentence's row for the players the question
    names, if that sentence is a player-count table with such a row, and its quote."""
    quote = _quote_of(closest, quotes)
    if quote is None:
        return None
    answer = row_answer(question.text, question.lang, closest.text)
    return (answer, quote) if answer else None


def _quote_of(sentence: Sentence, quotes: Sequence[Quote]) -> Quote | None:
    """The shown quote of a candidate sentence, if it is among `quotes`."""
    key = (sentence.hit.chunk.id, sentence.text)
    return next((q for q in quotes if (q.chunk_id, q.text) == key), None)


def _selected(quotes: Sequence[Quote], chosen: Sequence[Sentence]) -> list[Quote]:
    """The shown quotes of the chosen sentences, in the order shown: already verified, so
    not made again."""
    keys = {(s.hit.chunk.id, s.text) for s in chosen}
    return [q for q in quotes if (q.chunk_id, q.text) in keys]


def _is_deciding(quote: Quote) -> bool:
    return quote.deciding


def _with_renderings(quotes: Sequence[Quote], rendered: Sequence[Quote]) -> list[Quote]:
    """The quotes, each with its rendering where one was made (the selected ones)."""
    renderings = {(q.chunk_id, q.text): q for q in rendered}
    return [renderings.get((q.chunk_id, q.text), q) for q in quotes]


def _quotes_event(quotes: Sequence[Quote], lang: Lang) -> StreamEvent:
    return StreamEvent("quotes", text=rule_text(quotes, lang), quotes=tuple(quotes))


def _place(sentence: Sentence) -> tuple[int, int]:
    """A candidate sentence's place: its passage among the hits, and its place there."""
    return sentence.passage, sentence.position
