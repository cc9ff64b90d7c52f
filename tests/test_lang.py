from rag.lang import count_tokens, detect_lang, sentence_spans, split_sentences, tokenize


def test_detect_lang_english_and_chinese() -> None:
    assert detect_lang("A stunned monster does not activate.") == "en"
    assert detect_lang("被眩晕的怪物在本回合不会攻击。") == "zh"
    assert detect_lang("") == "en"


def test_detect_lang_mixed_text_goes_by_share() -> None:
    # A Chinese question naming the game in English is still Chinese...
    assert detect_lang("Maximum Apocalypse 里的 Stun 是什么意思？") == "zh"
    # ...and an English passage quoting one Chinese alias stays English.
    assert (
        detect_lang("Players also call Maximum Apocalypse 末日 when they play it at home.") == "en"
    )


def test_split_sentences_keeps_punctuation() -> None:
    assert split_sentences("Roll the dice. Move one tile! Did you win? Draw.") == [
        "Roll the dice.",
        "Move one tile!",
        "Did you win?",
        "Draw.",
    ]


def test_split_sentences_handles_abbreviations_and_enumerations() -> None:
    text = "Use a card, e.g. a Gear card. See Stun (p. 31) for details. Etc. ends here."
    assert split_sentences(text) == [
        "Use a card, e.g. a Gear card.",
        "See Stun (p. 31) for details.",
        "Etc. ends here.",
    ]
    assert split_sentences("3. Player Actions take place now.") == [
        "3. Player Actions take place now."
    ]


def test_split_sentences_chinese() -> None:
    assert split_sentences("将地图放在中央。每位玩家拿一张卡！可以移动吗？可以") == [
        "将地图放在中央。",
        "每位玩家拿一张卡！",
        "可以移动吗？",
        "可以",
    ]


def test_a_stop_inside_quoted_card_text_ends_no_sentence() -> None:
    text = (
        "怪兽卡如记载了『1回合只能使用1次。』文本，当回合不能再发动。"
        "如『从卡组把卡加入手卡。』『从卡组把卡送去墓地。』的效果也一样。"
    )
    assert split_sentences(text) == [
        "怪兽卡如记载了『1回合只能使用1次。』文本，当回合不能再发动。",
        "如『从卡组把卡加入手卡。』『从卡组把卡送去墓地。』的效果也一样。",
    ]


def test_a_quotation_closing_the_line_or_left_open_still_ends_sentences() -> None:
    assert split_sentences("他说：「好的。」\n另一句。") == ["他说：「好的。」", "另一句。"]
    assert split_sentences("消灭（移出游戏）。下一句！") == ["消灭（移出游戏）。", "下一句！"]
    assert split_sentences("（注：括号没有闭合。第二句。") == ["（注：括号没有闭合。", "第二句。"]


def test_newline_ends_a_sentence_and_spans_slice_back() -> None:
    text = "Move\nSpend 1 action to move.  Then stop."
    spans = sentence_spans(text)
    assert [text[s:e] for s, e in spans] == ["Move", "Spend 1 action to move.", "Then stop."]


def test_tokenize_english_drops_stopwords_and_punctuation() -> None:
    assert tokenize("Can I move diagonally? Monsters with 10HP don't activate!") == [
        "move",
        "diagonally",
        "monsters",
        "10hp",
        "activate",
    ]


def test_tokenize_chinese_sentence_into_words() -> None:
    tokens = tokenize("怪物被眩晕后不会攻击。")
    assert tokens == ["怪物", "被", "眩晕", "后", "不会", "攻击"]


def test_tokenize_mixed_text() -> None:
    assert tokenize("Stun是什么意思") == ["stun", "是", "什么", "意思"]


def test_count_tokens_counts_every_word() -> None:
    assert count_tokens("Can I move diagonally?") == 4
    assert count_tokens("") == 0
