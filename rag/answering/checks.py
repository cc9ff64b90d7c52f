"""Checks that do not trust the model: a conclusion is shown only when it passes them all.

- numbers: every number the conclusion states appears in its quotes, a thing it counts
  ("one die") is not counted otherwise by every quote that counts it ("the two Spawn dice"),
  and a bound it puts on a number ("6 or below") is one a quote puts on it ("below 6");
- negation: at least one conclusion sentence restates a quote (most of its words are the
  quote's, or its rendering's), so a quote vouches for it; each sentence that restates
  one says "not" as often, modulo two, as the quote does ("you may … if you DO NOT have"
  read back as "you can't … if you don't have" has one negation too many and is caught),
  and one that reverses what follows a rule's condition must reverse that condition too;
- own_words: an English conclusion on English quotes uses no content word that its quotes,
  the question and the game's names do not ("they are eliminated" where no rule eliminates);
- answer_word: an opening yes or no agrees with the claim after it ("Yes, you cannot …"
  is caught), judged when the claim restates the question;
- quantity: a question asking how many is answered with a number (or no limit);
- when_not: a question asking when something does not happen is answered by a "not" or
  an "only";
- markers: the model was told to write none; any it wrote must point at a shown quote;
- language: it is in the asker's language, glosses in brackets aside (a small model given
  English rule text for a Chinese question sometimes copies the rule out in English).
A rendering is a restatement of its quote, so it must pass the numbers and negation
checks against that quote, keep every number the quote states and its "after", "before"
and "only", say "each round" only of a quote that names a round or turn, and gloss only
the quote's own English terms, or it is not shown.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from rag.answering.data import tuning, words
from rag.answering.question import Question, Shape
from rag.answering.rewording import split_condition
from rag.lang import (
    CJK_RE,
    ENGLISH_GLOSS,
    detect_lang,
    negations,
    sentence_spans,
    tokenize,
)
from rag.types import Check, Lang, Quote

EN, ZH = words("en"), words("zh")


def _any_word(listed: Sequence[str]) -> str:
    """A regular expression matching any of the words, as whole words."""
    return rf"\b(?:{'|'.join(listed)})\b"


MARKER = re.compile(r"[\[【]\s*(\d+(?:\s*[,，、]\s*\d+)*)\s*[\]】]")

# --- numbers ---------------------------------------------------------------------------

# Digits standing alone: not part of a name like "D6" or "Mission2", not a marker.
_DIGITS = re.compile(r"(?<![\[\d.A-Za-z])\d+(?![\]\d])")
_EN_WORD_VALUE = {word: n for n, word in enumerate(EN["number_words"], start=1)}
# Ordinals count nothing ("draw the second card" draws one) but are read as numbers.
_EN_ORDINAL_VALUE = {word: n for n, word in enumerate(EN["ordinals"], start=2)}
_ZH_DIGIT: dict[str, int] = ZH["digits"]
_ZH_TEN: str = ZH["ten"]
_ZH_NUMERAL = re.compile(f"[{''.join(_ZH_DIGIT)}{_ZH_TEN}]+")


def _zh_value(numeral: str) -> int | None:
    """二 -> 2, 十二 -> 12, 二十 -> 20, 二十五 -> 25; other shapes are not read."""
    if _ZH_TEN not in numeral:
        return _ZH_DIGIT.get(numeral) if len(numeral) == 1 else None
    tens, _, ones = numeral.partition(_ZH_TEN)
    if len(tens) > 1 or len(ones) > 1:
        return None
    return (_ZH_DIGIT.get(tens, 0) if tens else 1) * 10 + (_ZH_DIGIT.get(ones, 0) if ones else 0)


def stated_numbers(text: str, *, one_words: bool = True) -> set[int]:
    """The numbers a text states: digits, English number words and ordinals from "second",
    and Chinese numerals.

    With one_words False, "one" and 一 are not counted: a conclusion says "draw one card"
    or 抽一张 where the rule says "draw a card", and 一 is part of many words.
    """
    text = MARKER.sub(" ", text)
    numbers = {int(d) for d in _DIGITS.findall(text)}
    for word in re.findall(r"[a-z]+", text.lower()):
        if word in _EN_WORD_VALUE and (one_words or word != "one"):
            numbers.add(_EN_WORD_VALUE[word])
        elif word in _EN_ORDINAL_VALUE:
            numbers.add(_EN_ORDINAL_VALUE[word])
    for numeral in _ZH_NUMERAL.findall(text):
        value = _zh_value(numeral) if one_words or numeral != "一" else None
        if value is not None:
            numbers.add(value)
    return numbers


def unsupported_numbers(text: str, sources: Sequence[str]) -> set[int]:
    """Numbers stated in `text` that none of `sources` states."""
    stated = set().union(*(stated_numbers(s) for s in sources)) if sources else set()
    return stated_numbers(text, one_words=False) - stated


# What a number may count, a word or two after it ("two Spawn dice", "one monster card").
_COUNTED_WINDOW = 2
_NOT_COUNTED = frozenset(EN["not_counted"])  # "one or two dice", "one of the cards"
_BEFORE_COUNT = frozenset(EN["before_count"])  # "roll the two dice", "draw up to three"
_SINGULAR: dict[str, str] = EN["plurals"]


def counted_things(text: str, *, articles: bool = False) -> dict[tuple[str, str], set[int]]:
    """What `text` counts, by the English verb before the number and each noun a word or
    two after it: "roll one die" -> {(roll, die): {1}}, "Roll the two Spawn dice" ->
    {(roll, spawn): {2}, (roll, die): {2}}; "both" counts two. With `articles`, "a" and
    "an" count one (a rule's "draw a card" allows a conclusion's "draw one card")."""
    counted: dict[tuple[str, str], set[int]] = {}
    words = [_fold(w) for w in re.findall(r"[a-z]+|\d+", MARKER.sub(" ", text).lower())]
    for i, word in enumerate(words):
        value = _count_value(word, articles=articles)
        if value is None:
            continue
        before = [w for w in words[max(0, i - 3) : i] if w not in _BEFORE_COUNT]
        verb = before[-1] if before else ""
        for following in words[i + 1 : i + 1 + _COUNTED_WINDOW]:
            if following in _NOT_COUNTED or _count_value(following, articles=True) is not None:
                break
            counted.setdefault((verb, following), set()).add(value)
    return counted


def _fold(word: str) -> str:
    """ "dice" is "die", "cards" is "card", "draws" is "draw"."""
    return _without_plural(_SINGULAR.get(word, word))


def _without_plural(word: str) -> str:
    """An English word's plural (or third-person) "s" taken off: "cards" is "card"."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and word.isascii() else word


def _count_value(word: str, *, articles: bool) -> int | None:
    if word.isdigit():
        return int(word)
    if word == "both":
        return 2
    if articles and word in ("a", "an"):
        return 1
    return _EN_WORD_VALUE.get(word)


def miscounted(text: str, sources: Sequence[str]) -> list[str]:
    """Things `text` counts otherwise than every source that does the same with them:
    "roll one die" where the rule says "Roll the two Spawn dice". (A rule's "hand limit is
    ten cards" says nothing against "draw one card".)"""
    allowed: dict[tuple[str, str], set[int]] = {}
    for source in sources:
        for key, values in counted_things(source, articles=True).items():
            allowed.setdefault(key, set()).update(values)
    return [
        f"{verb} {'/'.join(str(v) for v in sorted(values))} {noun}".strip()
        for (verb, noun), values in counted_things(text).items()
        if (verb, noun) in allowed and not values & allowed[verb, noun]
    ]


# A bound on a number, by the words around it: "below 6" is (6, below, strict), "6 or more"
# (6, above, inclusive). Chinese 以下 and 以上 are read either way, so they agree with both.
NUMBER = rf"(\d+|(?:{'|'.join(EN['number_words'])})\b|{_ZH_NUMERAL.pattern})"
Side = Literal["below", "above"]
_COUNTED = rf"\s*[{ZH['measure_words']}]?\s*"  # a measure word between: 6张或以上
# Words before the number, then words after it, each language's in its order (a phrase
# before a shorter one it contains); Chinese 以下 and 以上 do not say whether they include it.
_BOUND_WORDS: list[tuple[Literal["before", "after"], str, Side, bool | None]] = [
    (
        position,
        entry[position].replace("{counted}", _COUNTED),
        entry["side"],
        entry.get("inclusive"),
    )
    for position in ("before", "after")
    for entry in [*EN["bounds"], *ZH["bounds"]]
    if position in entry
]
_BOUNDS = [
    (
        re.compile(
            rf"(?:{words})\s*有?\s*{NUMBER}"
            if position == "before"
            else rf"(?<![A-Za-z\d.]){NUMBER}{words}",
            re.IGNORECASE,
        ),
        side,
        inclusive,
    )
    for position, words, side, inclusive in _BOUND_WORDS
]


@dataclass(frozen=True)
class Bound:
    value: int
    side: Side
    inclusive: bool | None  # None: the words do not say (以下, 以上)
    phrase: str

    def agrees(self, other: Bound) -> bool:
        return (
            self.value == other.value
            and self.side == other.side
            and (None in (self.inclusive, other.inclusive) or self.inclusive == other.inclusive)
        )


def number_value(word: str) -> int | None:
    """What `NUMBER` captured: digits or an English number word, else a Chinese numeral."""
    value = _count_value(word.lower(), articles=False)
    return value if value is not None else _zh_value(word)


def bounds(text: str) -> list[Bound]:
    """The bounds a text puts on numbers: "below 6", "at least one", "6 or more", 至少一个."""
    text = MARKER.sub(" ", text)
    matches = sorted(
        ((match, side, inclusive) for pattern, side, inclusive in _BOUNDS
         for match in pattern.finditer(text)),
        key=lambda found: (found[0].start(), -found[0].end()),
    )  # fmt: skip
    found, taken = [], 0
    for match, side, inclusive in matches:
        value = number_value(match[1])
        # Overlaps are dropped: "no more than 5" holds "more than 5", which it is not.
        if match.start() >= taken and value is not None:
            found.append(Bound(value, side, inclusive, match[0].strip()))
            taken = match.end()
    return found


def unbounded(text: str, sources: Sequence[str]) -> list[Bound]:
    """Bounds in `text` that no source puts on the same number the same way: "to 6 or
    below" where the rule says "below 6"."""
    allowed = [bound for source in sources for bound in bounds(source)]
    return [b for b in bounds(text) if not any(b.agrees(a) for a in allowed)]


def numbers_check(
    conclusion: str, quotes: Sequence[Quote], game_names: Sequence[str] = ()
) -> Check:
    """The numbers a conclusion states, counts and bounds, against its quotes'. The game's
    own names are not claims ("To win a mission in DECK 52: Final Bus, …")."""
    for name in sorted(game_names, key=len, reverse=True):
        conclusion = re.sub(re.escape(name), " ", conclusion, flags=re.IGNORECASE)
    sources = [q.text for q in quotes]
    extra = unsupported_numbers(conclusion, sources)
    if extra:
        listed = ", ".join(str(n) for n in sorted(extra))
        return Check("numbers", False, f"states {listed}, which no quote states")
    wrong = miscounted(conclusion, sources)
    if wrong:
        return Check(
            "numbers", False, f"counts {', '.join(wrong)}, which the quotes count otherwise"
        )
    loose = unbounded(conclusion, sources)
    if loose:
        said = ", ".join(repr(b.phrase) for b in loose)
        return Check("numbers", False, f"says {said}, which no quote bounds that way")
    return Check("numbers", True)


# --- negation ---------------------------------------------------------------------------

# English words holding a "not" that Chinese says with a negator: un- and non- words
# (unrevealed 未揭示, non-location 非地点), -less words, infinite 无限, instead of 而不是,
# other than 非, miss 未命中, fail 未能, run out 没有, lack 缺少. Not a bare "instead" ("instead
# move the die": do this in its place), nor words that merely begin with "un" (until, unit …).
_EN_PRIVATIVE = re.compile(
    r"\b(?:un(?!til|der|it|iq|ivers|ion|iform|animous)[a-z]{3,}|non-?(?!etheless)[a-z]{3,}"
    r"|[a-z]{3,}less|in(?:finite|valid|active|complete|sufficient|eligible)|impossible"
    r"|illegal|instead of|other than|miss(?:es|ed|ing)?|fail(?:s|ed|ing)?|lack(?:s|ed|ing)?"
    r"|(?:run|runs|ran|running) out)\b",
    re.IGNORECASE,
)
_ZH_PRIVATIVE = re.compile(r"未|(?<![除并])非(?!常)|无(?![法论需须])|没有|而不是")
_UNLESS = re.compile(r"\bunless\b", re.IGNORECASE)
# A yes/no answer word opening a conclusion answers the question; the claim follows it.
_ANSWER_WORD = re.compile(
    rf"^\s*(?:(?:yes|no)\b[\s,.;:!—-]*|(?:{'|'.join(ZH['answer_words'])})\s*[，,。.！!：:；;]\s*)",
    re.IGNORECASE,
)
_EN_OPENER = re.compile(r"(yes|no)\b")
# How a Chinese answer says no, tried before yes (不会 is not 会), and yes.
_ZH_NO, _ZH_YES = tuple(ZH["no"]), tuple(ZH["yes"])
_LEADING = re.compile(r"^[\s*_#>\"'“”‘’「」『』【】()（）:：-]+")
# When a conclusion sentence restates a quote, its negations must match that quote's
# (tuning.toml says why these numbers). Words in brackets are glosses ("复活（Revive）" is one
# word, not two) and do not count.
_RESTATING = tuning("restating")
RESTATES: float = _RESTATING["share"]
MIN_CLAIM_WORDS: int = _RESTATING["min_claim_words"]
_GLOSS = re.compile(r"（[^（）]*）|\([^()]*\)")


def answer_word(text: str, lang: Lang) -> Literal["yes", "no"] | None:
    """The yes or no a text opens with (en yes/no; zh 是/可以/会… or 不/否/没…)."""
    head = _LEADING.sub("", text).casefold()
    match = _EN_OPENER.match(head)
    if match:
        return "yes" if match[1] == "yes" else "no"
    if lang == "zh":
        if head.startswith(_ZH_NO):
            return "no"
        if head.startswith(_ZH_YES):
            return "yes"
    return None


def _words(text: str) -> set[str]:
    """Content words, plurals folded ("cards" is "card")."""
    return {_without_plural(w) for w in tokenize(text)}


def restated(sentence: str, sources: Sequence[str], share: float = RESTATES) -> int | None:
    """Index of the source the sentence restates, if it restates any (`share` of its words
    in one): the source most alike it both ways (Dice overlap). A short claim ("You cannot
    target your current tile.") has all its words in a long neighbouring rule too, and is
    read against the one it copies."""
    words = _words(_GLOSS.sub(" ", sentence))
    if len(words) < MIN_CLAIM_WORDS:
        return None
    overlaps = [(len(words & own), len(own)) for own in map(_words, sources)]
    if not any(shared / len(words) >= share for shared, _ in overlaps):
        return None
    dice = [shared / (len(words) + size) for shared, size in overlaps]  # halved: same order
    return max(range(len(sources)), key=dice.__getitem__)


def privatives(text: str) -> int:
    """English words that say "not" inside themselves (`_EN_PRIVATIVE`)."""
    return len(_EN_PRIVATIVE.findall(text))


def spelled_privatives(text: str) -> int:
    """Negations that can spell out a privative word: not a condition's "unless" (除非) and
    not a verb's 不 or 无法 in Chinese, only 未, 非, 无, 没有 and 而不是."""
    if CJK_RE.search(text):
        return len(_ZH_PRIVATIVE.findall(text))
    return negations(text) - len(_UNLESS.findall(text))


def flipped(claim: str, source: str) -> bool:
    """Whether a restatement says "not" an odd number of times more or less than its source,
    beyond what privative words spelled out account for: "unrevealed" may be 未揭示 or "not
    revealed", but "non-location cards are not removed" still reverses "non-location cards
    are removed"."""
    extra = negations(claim) - negations(source)
    if extra % 2 == 0:
        return False
    fewer, more = (source, claim) if extra > 0 else (claim, source)
    return abs(extra) > min(privatives(fewer) - privatives(more), spelled_privatives(more))


def reversed_under_own_condition(claim: str, source: str) -> bool:
    """Whether a claim "If C', not Y" reverses the rule "If C, Y" it restates: its "not"
    differs from the rule's in what follows, and C' is not C turned round ("If you have a
    monster card attached, you can't attempt a stealth test" turns round "If you DO NOT
    have any, you may attempt one"; "If you cannot do the stealth test, your stealth attempt
    is not successful" reverses "If the roll is lower …, your stealth attempt is
    successful")."""
    claimed, ruled = split_condition(claim), split_condition(source)
    if claimed is None or ruled is None:
        return False
    (claim_if, claim_then), (rule_if, rule_then) = claimed, ruled
    if restated(claim_then, [rule_then]) is None or not flipped(claim_then, rule_then):
        return False
    return restated(claim_if, [rule_if]) is None or not flipped(claim_if, rule_if)


# Clauses a semicolon joins state a rule each ("The maximum is 3 Monster tokens per tile;
# do not place any new tokens on tiles that already have 3 tokens."): a claim restating one
# carries only that one's negations.
_SEMICOLON = re.compile(r"\s*[;；]\s*")


def _english_in_chinese(text: str, quote: str) -> bool:
    """Whether the text is Chinese about an English quote: a rendering's wording checks
    (`dropped_bounds`, `dropped_terms`, `invented_words`) know the words of both."""
    return bool(CJK_RE.search(text)) and not CJK_RE.search(quote)


def _sources(conclusion: str, quotes: Sequence[Quote]) -> list[tuple[int, str]]:
    """What each quote is compared in, clause by clause: its own words, or its rendering
    for a conclusion in another language, Chinese about an English rulebook or English about
    a Chinese one (no rendering: not comparable)."""
    chinese = bool(CJK_RE.search(conclusion))
    pairs = [
        (i, q.rendering if chinese != bool(CJK_RE.search(q.text)) else q.text)
        for i, q in enumerate(quotes)
    ]
    return [
        (i, clause)
        for i, text in pairs
        if text
        for clause in _SEMICOLON.split(text)
        if clause.strip()
    ]


def _claims(conclusion: str) -> list[str]:
    """The conclusion's sentences, the opening yes/no word taken off the first."""
    sentences = [conclusion[start:end] for start, end in sentence_spans(conclusion)]
    return [c for c in (_ANSWER_WORD.sub("", s).strip() for s in sentences) if c]


def negation_check(conclusion: str, quotes: Sequence[Quote]) -> Check:
    """Each conclusion sentence against the quote it restates, if it restates one; at least
    one must, or the conclusion says nothing a quote can vouch for."""
    comparable = _sources(conclusion, quotes)
    checked = 0
    for claim in _claims(conclusion):
        found = restated(claim, [text for _, text in comparable])
        if found is None:
            continue
        checked += 1
        index, source = comparable[found]
        if flipped(claim, source) or reversed_under_own_condition(claim, source):
            return Check(
                "negation", False, f"{claim!r} reverses the negation of quote {quotes[index].n}"
            )
    if not checked:
        return Check("negation", False, "restates no quote, so it cannot be checked")
    return Check("negation", True, f"{checked} restating sentence(s) checked")


def answer_word_check(conclusion: str, question: str, lang: Lang) -> Check:
    """A yes or no must agree with the claim after it: "No, you cannot X" to "Can I X?",
    not "Yes, you cannot X". Judged only when the claim restates the question's words."""
    word = answer_word(conclusion, lang)
    claims = _claims(conclusion)
    if word is None or not claims or restated(claims[0], [question], share=0.5) is None:
        return Check("answer_word", True, "not judged")
    expected = "no" if negations(question) % 2 != negations(claims[0]) % 2 else "yes"
    if word != expected:
        return Check("answer_word", False, f"opens with {word!r} but its claim says {expected!r}")
    return Check("answer_word", True)


# A quantity answered without a number: there is none to give.
_NO_LIMIT = re.compile(f"{_any_word(EN['no_limit'])}|{'|'.join(ZH['no_limit'])}", re.IGNORECASE)


def quantity_check(conclusion: str, shape: Shape) -> Check:
    """A question asking how many is answered by a number (or by there being no limit): a
    conclusion without one answers something else ("each player receives the same number
    of Wire cards as the total number of players" to "how many wire cards does everyone
    get?")."""
    if not shape.how_many:
        return Check("quantity", True, "not asked")
    if stated_numbers(conclusion) or _NO_LIMIT.search(conclusion):
        return Check("quantity", True)
    return Check("quantity", False, "the question asks how many; the conclusion states no number")


# Words that join what the quotes say rather than say something of their own.
_CONNECTIVES = frozenset(EN["connectives"])
# The endings an English word takes as it is used: "placed", "places" and "placing" are one
# word, as are "eliminate" and "eliminated", and "throws" and "thrown".
_ENDING = re.compile(r"(?:'s|ing|ed|en|es|e|s|d|n)$")


def _stem(word: str) -> str:
    """The word with its endings taken off, one after another ("opened", "opens" and "open"
    are alike), down to two letters; an irregular plural is its singular first ("dice")."""
    word = _SINGULAR.get(word, word)
    while len(word) > 2 and (shorter := _ENDING.sub("", word)) != word:
        word = shorter
    return word


def _stems(text: str) -> set[str]:
    return {_stem(word) for word in tokenize(text)}


def own_words_check(
    conclusion: str, question: str, quotes: Sequence[Quote], names: Sequence[str] = ()
) -> Check:
    """An English conclusion on English quotes says nothing in words of its own: each of its
    content words is one its quotes, the question or the game's names use. A small model
    that composes where it should copy states an outcome no rule gives ("If a player runs
    out of cards, they are eliminated" over rules that never eliminate anyone), in a
    sentence whose other words are the quotes' and so pass for a restatement of them."""
    if CJK_RE.search(conclusion) or any(CJK_RE.search(q.text) for q in quotes):
        return Check("own_words", True, "not judged")
    allowed = _stems(" ".join([question, *names, *(q.text for q in quotes)]))
    own = sorted(
        word
        for word in tokenize(conclusion)
        if number_value(word) is None  # numbers are the numbers check's
        and word not in _CONNECTIVES
        and _stem(word) not in allowed
    )
    if own:
        return Check("own_words", False, f"says {own}, which no quote and not the question say")
    return Check("own_words", True)


# What says the "not" side: a negation (`negations`), or a restriction or
# exception ("only", "except", 只, 除了 …) that leaves the rest out.
_EN_RESTRICTION = re.compile(_any_word(EN["restriction"]), re.IGNORECASE)
_ZH_RESTRICTION = re.compile("|".join(ZH["restriction"]))


def when_not_check(conclusion: str, shape: Shape) -> Check:
    """A question asking only when something does not happen ("when can't I …?") is
    answered by the case in which it does not: a conclusion saying neither "not" nor "only"
    states when it does ("A Map card with a Fuel icon resolves your Fuel objective when …")
    and leaves the player to turn it round, or answers something else."""
    if not shape.when_not:
        return Check("when_not", True, "not asked")
    text = _GLOSS.sub("", conclusion)
    if negations(text) or _EN_RESTRICTION.search(text) or _ZH_RESTRICTION.search(text):
        return Check("when_not", True)
    return Check(
        "when_not",
        False,
        "the question asks when not; the conclusion says neither 'not' nor 'only'",
    )


def chinese_left(english: str) -> bool:
    """Whether English text holds Chinese outside its brackets ("The maximum体力 limit"): a
    bracket may gloss a term in the rulebook's words, but the text itself mixes two
    languages."""
    return CJK_RE.search(_GLOSS.sub("", english)) is not None


def language_check(conclusion: str, lang: Lang) -> Check:
    """The conclusion is written in the asker's language, and an English one holds no
    Chinese; glossed terms do not count."""
    written = detect_lang(_GLOSS.sub("", conclusion))
    if written != lang:
        return Check("language", False, f"written in {written}, asked in {lang}")
    if lang == "en" and chinese_left(conclusion):
        return Check("language", False, "Chinese left in the English")
    return Check("language", True)


# --- the conclusion's checks, in the order they run ----------------------------------------


@dataclass(frozen=True)
class Draft:
    """A conclusion the model wrote, with what its checks hold it to."""

    text: str
    quotes: Sequence[Quote]  # the quotes it rests on
    question: Question
    copied: bool = False  # copied from a quote's cells: no negation or word of its own


class ConclusionCheck(Protocol):
    """One check a conclusion must pass to be shown."""

    def judge(self, draft: Draft) -> Check: ...


COPIED = Check("negation", True, "copied from the quote's cells: no negation of its own")


class Numbers:
    def judge(self, draft: Draft) -> Check:
        return numbers_check(draft.text, draft.quotes, draft.question.game.names())


class Negation:
    def judge(self, draft: Draft) -> Check:
        return COPIED if draft.copied else negation_check(draft.text, draft.quotes)


class AnswerWord:
    def judge(self, draft: Draft) -> Check:
        return answer_word_check(draft.text, draft.question.text, draft.question.lang)


class Quantity:
    def judge(self, draft: Draft) -> Check:
        return quantity_check(draft.text, draft.question.shape)


class WhenNot:
    def judge(self, draft: Draft) -> Check:
        return when_not_check(draft.text, draft.question.shape)


class Language:
    def judge(self, draft: Draft) -> Check:
        return language_check(draft.text, draft.question.lang)


class OwnWords:
    def judge(self, draft: Draft) -> Check:
        if draft.copied:
            return Check("own_words", True, "not judged: copied from the quote's cells")
        question = draft.question
        return own_words_check(draft.text, question.in_context, draft.quotes, question.game.names())


CONCLUSION_CHECKS: tuple[ConclusionCheck, ...] = (
    Numbers(),
    Negation(),
    AnswerWord(),
    Quantity(),
    WhenNot(),
    Language(),
    OwnWords(),
)


# --- markers -----------------------------------------------------------------------------


def strip_markers(text: str, shown: Sequence[int]) -> tuple[str, Check]:
    """The text without the markers the model wrote; the check fails when one of them
    pointed at no shown quote."""
    written = {int(n) for m in MARKER.finditer(text) for n in re.findall(r"\d+", m[1])}
    stray = written - set(shown)
    cleaned = re.sub(r"[ \t]+([.。,，;；])", r"\1", MARKER.sub("", text)).strip()
    if stray:
        listed = ", ".join(str(n) for n in sorted(stray))
        return cleaned, Check("markers", False, f"cites [{listed}], which no shown quote has")
    return cleaned, Check("markers", True)


# --- renderings --------------------------------------------------------------------------


# Between a number and the unit written against it: "3AP" holds the word "AP".
_NUMBER_UNIT = re.compile(r"(?<=\d)(?=[A-Za-z])")


def foreign_glosses(rendering: str, quote: str) -> list[str]:
    """Bracketed English terms in a rendering that its quote does not contain: the rendering
    gives a term's English word "the first time", and a word the quote lacks was not taken
    from it (a small model may return the instruction's own example, 潜行判定（Stealth
    test）, as the rendering of an unrelated sentence)."""
    own = _words(_NUMBER_UNIT.sub(" ", quote))
    # Brackets holding Chinese are the sentence's own asides (（A或B）, （例如C）), not glosses.
    glosses = [g for g in ENGLISH_GLOSS.findall(rendering) if not CJK_RE.search(g)]
    return [g for g in glosses if not _words(g) <= own]


# A list item's own number ("2. Shuffle the deck.", or a PDF step's "4 Shuffle the Wire
# cards…", the capital word after it): a rendering may leave it out.
_ITEM_NUMBER = re.compile(r"^\s*\d+(?:[.)]\s|\s+(?=[A-Z][a-z]))")


# A Chinese rule's ordinal one (第1回合), which an English rendering keeps as "first".
_ZH_ORDINAL_ONE = re.compile(rf"{ZH['ordinal']}\s*1(?!\d)")
_EN_ORDINAL_ONE = re.compile(rf"\b{EN['ordinal_one']}\b", re.IGNORECASE)


def dropped_numbers(rendering: str, quote: str) -> set[int]:
    """Numbers the quote states that the rendering does not ("If you ever have 10 cards
    and draw a card…" rendered without its 10 has lost its condition). "One" and "a" are
    not asked for: 一 stands in many words, and "a card" may be rendered 一张 or not."""
    stated = stated_numbers(_ITEM_NUMBER.sub(" ", quote), one_words=False)
    kept = stated_numbers(rendering)
    if _ZH_ORDINAL_ONE.search(quote) and _EN_ORDINAL_ONE.search(rendering):
        kept.add(1)
    return stated - kept


# The "after", "before" and "only" of an English rule, each with the Chinese that keeps it
# (words/zh.toml says why); "only" before a number stresses the number, checked anyway.
_BOUNDS_KEPT_AS = [
    (
        re.compile(
            rf"\b{kept['en']}\b"
            + (
                rf"(?!\s+(?:\d|{'|'.join(EN['number_words'])})\b)"
                if kept.get("not_before_number")
                else ""
            ),
            re.IGNORECASE,
        ),
        re.compile(kept["zh"]),
    )
    for kept in ZH["kept_bounds"]
]


def dropped_bounds(rendering: str, quote: str) -> list[str]:
    """The "after", "before" and "only" of an English quote that its Chinese rendering
    does not keep."""
    if not _english_in_chinese(rendering, quote):
        return []
    return [
        found[0]
        for english, kept in _BOUNDS_KEPT_AS
        if (found := english.search(quote)) and not kept.search(rendering)
    ]


# A game's components and where they lie, each with the Chinese that names it
# (words/zh.toml). A word kept in English in the sentence names it too; a bracketed English
# gloss does not (从 loot 桌（Loot deck）: a table).


def _english_words(alternatives: str) -> re.Pattern[str]:
    """The English words, in any case, bounded by letters, not by \\b: an English word in a
    Chinese sentence has a Chinese character, a word character, on either side
    (由TURN ORDER DECK决定)."""
    return re.compile(rf"(?<![A-Za-z])(?:{alternatives})(?![A-Za-z])", re.IGNORECASE)


_TERMS = [(_english_words(kept["en"]), re.compile(kept["zh"])) for kept in ZH["kept_terms"]]


def dropped_terms(rendering: str, quote: str) -> list[str]:
    """The components and places an English quote names ("deck", "tile", "top" …) that its
    Chinese rendering names neither in Chinese nor in English outside a gloss."""
    if not _english_in_chinese(rendering, quote):
        return []
    # Without its English glosses; a bracket holding Chinese is an aside (（A或B）) and stays.
    sentence = ENGLISH_GLOSS.sub(lambda m: m[0] if CJK_RE.search(m[1]) else "", rendering)
    return [
        found[0]
        for english, kept in _TERMS
        if (found := english.search(quote))
        and not kept.search(sentence)
        and not english.search(sentence)
    ]


# What a rendering may say only of a quote that names it ("each round", the hand, dice),
# with the English that does (words/zh.toml).
_NAMED_ONLY = [(re.compile(named["zh"]), _english_words(named["en"])) for named in ZH["named_only"]]


def invented_words(rendering: str, quote: str) -> list[str]:
    """What a Chinese rendering says ("each round", the hand, dice) that its English quote
    names nowhere."""
    if not _english_in_chinese(rendering, quote):
        return []
    return [
        found[0]
        for chinese, english in _NAMED_ONLY
        if (found := chinese.search(rendering)) and not english.search(quote)
    ]


def faithful(rendering: str, quote: str) -> bool:
    """A rendering states every number its quote states and no other, says "not" as
    often (mod 2), keeps its "after", "before" and "only" and the components it names,
    adds no round, hand or dice it does not name, and glosses only English terms of it."""
    return (
        not unsupported_numbers(rendering, [quote])
        and not dropped_numbers(rendering, quote)
        and not flipped(rendering, quote)
        and not dropped_bounds(rendering, quote)
        and not dropped_terms(rendering, quote)
        and not invented_words(rendering, quote)
        and not foreign_glosses(rendering, quote)
    )
