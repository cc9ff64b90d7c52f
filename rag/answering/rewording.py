"""Question shapes: "when can't I X?" is asked both ways round; yes/no questions are told apart.

A small model answers in the polarity of the question: it copies the rule's condition and
puts the question's "can't" in front of it. That is right when the rule itself says
"cannot" ("you cannot place an enchantment token on a card that already has one"), and
backwards when the rule says when something is allowed: asked "when can't I do a stealth
test?", it states the very case in which the rulebook allows one. So a negated when/where
question is asked both ways round unless the sentence closest to it is itself negative.
Only the question the model reads is reworded; retrieval, evidence selection and the
answer's language use the question as asked. A question whether something is allowed, over
a rule allowing it under a condition, needs no model: its answer is that condition turned
round (`unless_frame`, `allowing_condition`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rag.answering.data import words
from rag.lang import ZH_NEGATING_BU, negations, sentence_spans
from rag.prompting import phrases
from rag.types import Lang

EN, ZH = words("en"), words("zh")
# A negated modal and its positive form, tried in order ("can't" -> "can").
_EN_POSITIVE: dict[str, str] = EN["positive"]
# The "not" may also follow the question's subject: "When does a monster not activate?",
# "When am I not allowed to scavenge?" (its positive form drops the "not").
_EN_QUESTION = re.compile(
    r"^(?P<lead>.*?\b(?P<wh>when|where|(?:in )?which \w+|in what (?:cases?|situations?)"
    r"|under what (?:conditions?|circumstances))\s+)"
    r"(?P<neg>" + "|".join(re.escape(n) for n in _EN_POSITIVE) + r"|(?:do|does|can|could|will"
    r"|would|is|are|am|may|must|should)\s+(?:(?!(?:and|or|but|then)\s)[\w'-]+\s+){1,7}?not)"
    r"\s+(?P<rest>[^?]+?)\s*\?*\s*$",
    re.IGNORECASE,
)

_ZH_POSITIVE: dict[str, str] = ZH["positive"]
# Any other negating 不 before a verb (不结算, 不算, 不放进) is dropped for the positive form.
_ZH_QUESTION = re.compile(
    r"^(?P<lead>.*?(?P<wh>什么时候|何时|哪些时候|什么情况下|哪些情况下|哪种情况下|什么情形下"
    r"|什么条件下|在哪里|哪里)[，,]?)"
    r"(?P<subject>[^，。？?！]{0,12}?)"
    r"(?P<neg>" + "|".join(_ZH_POSITIVE) + "|" + ZH_NEGATING_BU + r")"
    r"(?P<rest>[^？?]+?)\s*[？?]*\s*$"
)


# A leading condition ("If you ... DO NOT have ..., you may ..."): its negation is not the
# rule's; what the rule allows or forbids is in the clause after it.
_LEADING_CONDITION = re.compile(
    r"^\s*(?:(?:if|when|whenever|while|unless)\b[^,]*,|(?:如果|若|当)[^，,]*[，,])", re.IGNORECASE
)


# A choice not to act ("A player can decide not to attempt a stealth test") is an option the
# rule gives, not a case in which the thing cannot be done.
_CHOICE_NOT_TO = re.compile(
    r"\b(?:decides?|chooses?|opts?|elects?|prefers?)\s+not\s+to\b|选择不|决定不", re.IGNORECASE
)


def split_condition(sentence: str) -> tuple[str, str] | None:
    """A sentence opening with a condition ("If C, Y"), as that condition and the rest."""
    match = _LEADING_CONDITION.match(sentence)
    return (match[0], sentence[match.end() :]) if match else None


def _is_negative(rule: str) -> bool:
    rule = _CHOICE_NOT_TO.sub(" ", _LEADING_CONDITION.sub("", rule))
    return negations(rule) > 0


# A negation typed without its apostrophe at the table ("when cant I …", "doesnt").
_BARE_NEGATION = re.compile(r"\b(ca|do|does|wo|is|are)nt\b", re.IGNORECASE)


def _typed(question: str) -> str:
    """The question with its apostrophes as the shapes below read them: curly ones straight,
    and a negation typed without one given one ("cant" -> "can't")."""
    return _BARE_NEGATION.sub(r"\1n't", question.strip().replace("\u2019", "'"))


def _when_not(question: str, lang: Lang) -> re.Match[str] | None:
    return (_ZH_QUESTION if lang == "zh" else _EN_QUESTION).match(_typed(question))


def asks_when_not(question: str, lang: Lang) -> bool:
    """Whether the question asks only the "not" side as a when/where question ("when can't I
    do a stealth test?", 什么时候不能进行潜行判定？)."""
    return _when_not(question, lang) is not None


# Words of the asker, as the answer says them back ("my" -> "your").
_EN_PERSON: dict[str, str] = EN["person"]
_EN_WORD = re.compile(r"[A-Za-z']+")


# Only a question about being allowed is turned round: "you may X if C" means you cannot X
# unless C, but "X happens when C" does not say that nothing else brings X about.
_PERMISSION = frozenset([*EN["permission"], *ZH["permission"]])
# A rule that names its own exception ("every turn except the first") is copied as it is.
_EXCEPTION = re.compile(
    rf"\b(?:{'|'.join(EN['exception'])})\b|{'|'.join(ZH['exception'])}", re.IGNORECASE
)


def _when_not_allowed(question: str, lang: Lang) -> re.Match[str] | None:
    match = _when_not(question, lang)
    return match if match is not None and match["neg"].lower() in _PERMISSION else None


def asks_when_not_allowed(question: str, lang: Lang) -> bool:
    """Whether the question asks only when something is not allowed ("when can't I …?")."""
    return _when_not_allowed(question, lang) is not None


def unless_frame(question: str, lang: Lang, closest_rule: str | None) -> str | None:
    """The answer to a question asking only when something is not allowed, whose closest
    rule says when it is, with a {condition} to fill with a rule's own condition
    (`allowing_condition`): "You can't do a stealth test unless {condition}." /
    "除非{condition}，否则不能进行潜行判定。".

    A small model asked for the "can't" case states the allowed one, or drops a "not" when it
    turns the rule round, and asked to copy the condition it copies the whole sentence; so
    the condition is taken from the rule by its shape and
    the turn is made here. None when the closest rule is itself negative or names its
    exception (the model copies those the right way round), or for an English question
    whose subject is not the asker.
    """
    if closest_rule is not None and (_is_negative(closest_rule) or _EXCEPTION.search(closest_rule)):
        return None
    match = _when_not_allowed(question, lang)
    if match is None:
        return None
    if lang == "zh":
        subject = match["subject"].replace("我", "你")
        rest = match["rest"].replace("我", "你")
        return f"除非{{condition}}，否则{subject}{match['neg']}{rest}。"
    words = match["rest"].split(maxsplit=1)
    if len(words) < 2 or words[0].lower() not in ("i", "we"):
        return None
    rest = _EN_WORD.sub(lambda w: _EN_PERSON.get(w[0].lower(), w[0]), words[1])
    return f"You {match['neg'].lower()} {rest} unless {{condition}}."


# A rule allowing something under a condition, the condition captured: "If C, you may X",
# "You may X as long as C", "如果C，你可以X", "只要C，就可以X". A rule's subject is the
# asker or players (the unless frame puts the asker in), a conclusion's anyone it names ("A
# Hero may rest if TIRED": the model wrote it to answer the question).
_EN_PLAYER = r"(?:you|a player|players|they|he|she|he/she|the player|each player)"
_EN_NAMED = rf"(?:{_EN_PLAYER}|(?:a|an|the|each|every|your)\s+[A-Za-z][\w-]*)"


def _en_allowing(subject: str) -> tuple[re.Pattern[str], ...]:
    return (
        re.compile(
            r"^\s*(?:if|when|whenever|as long as|provided that)\s+(?P<condition>.+),\s*"
            rf"(?P<subject>{subject})\s+(?:may|can|are allowed to|is allowed to)\s+"
            r"(?P<action>[^;:]+?)\s*(?:[.!;:]|$)",
            re.IGNORECASE,
        ),
        re.compile(
            rf"^\s*(?P<subject>{subject})\s+(?:may|can|are allowed to|is allowed to)\s+"
            r"(?:only\s+)?(?P<action>[^,;:]+?)\s+"
            r"(?:only\s+)?(?:if|when|whenever|while|as long as|provided that)\s+"
            r"(?P<condition>[^;:]+?)\s*[.!]?\s*$",
            re.IGNORECASE,
        ),
    )


_EN_ALLOWING = _en_allowing(_EN_PLAYER)
_EN_ALLOWING_ANYONE = _en_allowing(_EN_NAMED)
_ZH_ALLOWING = (
    re.compile(
        r"^\s*(?:如果|若|假如|当|只要)(?P<condition>.+?)(?:的时候|时)?[，,]\s*"
        r"(?:你|玩家|他们|他|她)?(?:就)?(?:可以|能够|能)"
    ),
    re.compile(
        r"^.*?(?:可以|能够|能)[^，,。]+[，,]\s*(?:只要|如果|当)(?P<condition>[^。；]+?)(?:的时候|时)?\s*。?\s*$"
    ),
)
_END = re.compile(r"[\s.。，,；;！!]+$")


def _allowing(
    rule: str, lang: Lang, english: Sequence[re.Pattern[str]] = _EN_ALLOWING
) -> tuple[re.Match[str], str] | None:
    """The rule's match as one allowing something under a condition, and that condition."""
    for pattern in _ZH_ALLOWING if lang == "zh" else english:
        match = pattern.match(rule.replace("\u2019", "'"))
        if match:
            condition = _END.sub("", match["condition"]).strip()
            if lang == "en" and condition[:1].isupper() and not condition[:2].isupper():
                condition = condition[0].lower() + condition[1:]
            # a condition with an exception of its own ("…, unless …") does not turn round
            return (match, condition) if condition and not _EXCEPTION.search(condition) else None
    return None


def allowing_condition(rule: str, lang: Lang) -> str | None:
    """The condition under which a rule allows something ("If C, you may X" -> C), if it is
    shaped that way."""
    found = _allowing(rule, lang)
    return found[1] if found else None


# A Chinese conclusion saying when something is allowed: "S只能在C时X", "只有C，S才能X",
# "S只有C才能X".
_ZH_ONLY = (
    re.compile(
        r"^(?P<subject>[^，,。；]*?)只(?:能|可以)(?P<condition>在[^，,。；]+?(?:时|的时候|期间))"
        r"(?P<action>[^，,。；]+?)[。.]?$"
    ),
    re.compile(
        r"^只有(?P<condition>[^，,。；]+?)[，,]\s*(?P<subject>[^，,。；]*?)才(?:能|可以)"
        r"(?P<action>[^，,。；]+?)[。.]?$"
    ),
    re.compile(
        r"^(?P<subject>[^，,。；]+?)只有(?P<condition>[^，,。；]+?)才(?:能|可以)"
        r"(?P<action>[^，,。；]+?)[。.]?$"
    ),
)


def turned_round(conclusion: str, lang: Lang) -> str | None:
    """A conclusion of one sentence saying when something is allowed ("You can X only if C",
    "S只能在C时X"), said the way a "when can't I X?" question asks it: "You can't X unless
    C", "除非在C时，否则S不能X". None for any other shape."""
    if len(sentence_spans(conclusion)) != 1:
        return None
    if lang == "zh":
        text = conclusion.strip()
        match = next((m for m in (p.match(text) for p in _ZH_ONLY) if m), None)
        if match is None or _EXCEPTION.search(match["condition"]):
            return None
        return f"除非{match['condition']}，否则{match['subject']}不能{match['action']}。"
    found = _allowing(conclusion, "en", _EN_ALLOWING_ANYONE)
    if found is None:
        return None
    match, condition = found
    subject = match["subject"][0].upper() + match["subject"][1:]
    return f"{subject} can't {match['action']} unless {condition}."


def both_sides(question: str, lang: Lang, closest_rule: str | None = None) -> str:
    """The question asking when something is allowed and when not, if it asks only the
    "not" side as a when/where question and `closest_rule` (the rulebook sentence closest
    to it, if known) is not itself negative; otherwise the question unchanged."""
    if closest_rule is not None and _is_negative(closest_rule):
        return question
    match = _when_not(question, lang)
    if match is None:
        return question
    if lang == "zh":
        positive = _ZH_POSITIVE.get(match["neg"], "")
        return (
            f"{match['lead']}{match['subject']}{positive}{match['rest']}，"
            f"{match['wh']}{match['neg']}？"
        )
    neg = match["neg"]
    positive = _EN_POSITIVE.get(neg.lower()) or neg[: -len("not")].rstrip()
    return f"{match['lead']}{positive} {match['rest']}, and {match['wh'].lower()} not?"


# A yes/no question's last clause opens with an auxiliary ("If the Dog dies, can I keep
# playing?"; "Explore icon: is it optional?"); a question word there makes it open (English).
# Chinese asks with 吗, 是否 or A-not-A (能不能, 算不算).
# An auxiliary opening the last clause, negated ("Don't I …?", "Can't I …?") or not.
_EN_AUXILIARY = re.compile(
    r"^(?:so\s+|and\s+|but\s+|then\s+)?(?:(?:can|could|do|does|did|is|are|was|were|may|must"
    r"|should|shall|will|would|has|have|am)(?:n?['’]t)?|won['’]t)(?![\w'’])",
    re.IGNORECASE,
)
_CLAUSE_BREAK = re.compile(r"[,;:.!?，；：。！]\s*|\s+[-–—]+\s+")  # "Fuel card - does it …?"
# A question word opening a clause, or anywhere before a clause's auxiliary.
_EN_QUESTION_WORD = re.compile(r"\b(?:what|which|how|when|where|who|whom|whose|why)\b", re.I)
# A clause's leading phrase before its auxiliary: "with 8 players do we use every card?".
_EN_LEADING_PHRASE = re.compile(
    r"^(?:with|in|during|at|on|after|before|for|while|once|by)\s+(?P<phrase>.{1,40}?)\s+"
    r"(?=(?:can|could|do|does|did|is|are|may|must|should|will|would|has|have)\s)",
    re.IGNORECASE,
)
_ZH_YES_NO = re.compile(r"吗\s*[？?]?\s*$|是否|能否|可否|([\u4e00-\u9fff])不\1|有没有")


def asks_yes_or_no(question: str, lang: Lang) -> bool:
    """Whether the question asks for a yes or a no ("Is it immediate?", "是立刻激活吗？")."""
    text = _typed(question)
    if lang == "zh":
        return bool(_ZH_YES_NO.search(text))
    clauses = [c.strip() for c in _CLAUSE_BREAK.split(text) if c.strip()]
    if not clauses:
        return False
    # "If the Dog dies, can I keep playing?"; "With 8 players do we use every card?"
    last = clauses[-1]
    leading = _EN_LEADING_PHRASE.match(last)
    if leading and not _EN_QUESTION_WORD.search(leading["phrase"]):
        last = last[leading.end() :]
    if _EN_AUXILIARY.match(last):
        return True
    # "Can I put a second token on it, to double it again?"; not "Can I dodge? How?"
    return bool(_EN_AUXILIARY.match(clauses[0])) and not any(
        _EN_QUESTION_WORD.match(c) for c in clauses[1:]
    )


# A question asking for a quantity: "how many …?", "how much …?", 多少, 几 (not 哪几, "which
# ones", nor 几乎, "almost").
_EN_HOW_MANY = re.compile(r"\bhow\s+(?:many|much)\b", re.IGNORECASE)
_ZH_HOW_MANY = re.compile(r"多少|(?<!哪)几(?!乎)")


def asks_how_many(question: str, lang: Lang) -> bool:
    """Whether the question asks for a quantity ("how many wire cards does everyone get?")."""
    return bool((_ZH_HOW_MANY if lang == "zh" else _EN_HOW_MANY).search(question))


# The verb a Chinese yes/no question turns on, so the answer says 可以 / 不可以, not 是 / 不是.
_ZH_VERBS: list[str] = ZH["yes_no_verbs"]


def yes_no_word(answer: str, question: str, lang: Lang) -> str:
    """How a conclusion opens for `answer` ("yes" or "no") to this question."""
    if lang == "zh":
        verb = next((v for v in _ZH_VERBS if v in question), None)
        if verb:
            word = verb if answer == "yes" else ("没" if verb == "有" else "不") + verb
            return f"{word}。"
    return phrases(lang)[answer]
