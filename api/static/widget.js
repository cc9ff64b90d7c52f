/*
 * Rulekeeper widget: ask rules questions on any page; a citation or a quoted sentence opens
 * the rulebook where it stands (the page with the sentence highlighted, or its section with the
 * sentence marked), and a Rulebook tab browses the rulebook's contents. Quote first: the rule text shows as soon as it is found, the sentence that decides the
 * question first and highlighted; the conclusion's draft streams
 * in dimmed while it is being checked, and the final, checked answer replaces both.
 * No build step, no dependencies.
 *
 *   <div data-rulekeeper data-game="suros"></div>
 *   <script src="https://rules.example.org/widget.js" defer></script>
 *
 * Options (data attributes on the container): data-endpoint (the API's origin; default:
 * where this script came from), data-game (fix the game; default: a game picker),
 * data-api-key (when the server requires a key: a publishable key bound to this page's
 * origin, never a secret key), data-lang (the labels' language, "en" or "zh"; default: the
 * browser's). A page on another origin must be in the server's CORS allow-list (a
 * publishable key's origins are).
 *
 * Conversations: every question goes with its conversation, and the server decides whether
 * it follows up the one before (and keeps its context) or starts a new topic, which an
 * earlier one never colours; choosing another game (or "Any game") or "New conversation"
 * starts afresh.
 *
 * Security: every text from the server (answers, rulebook passages, error messages) is put
 * in the page as text nodes (textContent), never parsed as HTML. A section view, the one HTML
 * the server sends, goes into a sandboxed frame that runs no script. Rulebook pages are
 * fetched with the widget's headers (its key) and drawn into a canvas: an <img> from a blob:
 * URL is blocked by pages whose Content-Security-Policy allows only their own images.
 */
(function () {
  "use strict";

  var script = document.currentScript;
  var scriptOrigin = script && script.src ? new URL(script.src, location.href).origin : location.origin;

  var STYLE =
    ".rk{font:15px/1.45 system-ui,sans-serif;border:1px solid #ccd;border-radius:8px;padding:12px;max-width:46em;overflow-wrap:anywhere}" +
    ".rk,.rk *{box-sizing:border-box}" +
    ".rk [hidden]{display:none!important}" +
    ".rk form{display:flex;gap:6px;flex-wrap:wrap}" +
    ".rk input{flex:1 1 16em;padding:6px;min-width:0}" +
    ".rk select{max-width:100%}" +
    ".rk form button,.rk select,.rk input{min-height:2.6em}" +
    ".rk-tabs{display:flex;gap:4px;border-bottom:1px solid #ccd;margin:-4px 0 10px}" +
    ".rk-tab{min-height:2.75em;padding:0 1em;border:0;border-bottom:3px solid transparent;background:none;font:inherit;color:#445;cursor:pointer}" +
    ".rk-tab[aria-selected=true]{border-bottom-color:#2346c8;color:#2346c8;font-weight:600}" +
    ".rk-status{color:#555;min-height:1.4em;margin:6px 0}" +
    ".rk-status.rk-error{color:#a00}" +
    ".rk-question{font-weight:600;margin:6px 0}" +
    ".rk-follow-up{font-size:.8em;color:#555;margin-top:6px}" +
    ".rk-answered{font-size:.9em;color:#2346c8;margin:0 0 6px}" +
    ".rk-passage-where{font-size:.9em;color:#555}" +
    ".rk-answer,.rk-rule{white-space:pre-wrap}" +
    ".rk-draft{color:#666;font-style:italic;white-space:pre-wrap;margin-top:8px}" +
    ".rk-draft-label{font-size:.85em;font-style:normal;color:#888;margin-right:.4em}" +
    ".rk-deciding,.rk-passage-quote{background:#fff3b0;color:inherit;font-weight:600;padding:0 2px}" +
    ".rk-deciding[role=button],.rk-quote-link{cursor:pointer}" +
    ".rk-quote-link{text-decoration:underline dotted #99a}" +
    ".rk-marker{border:0;background:#e8ecff;border-radius:4px;padding:1px 5px;cursor:pointer;font:inherit;color:#223}" +
    ".rk-citations{padding-left:1.2em}" +
    ".rk-cite{display:block;border:0;background:none;color:#2346c8;cursor:pointer;text-align:left;font:inherit;padding:.5em 0}" +
    ".rk-bar{display:flex;flex-wrap:wrap;gap:6px;align-items:center;margin-bottom:6px}" +
    ".rk-bar button,.rk-toc button{min-height:2.75em;min-width:2.75em;padding:0 .8em;border:1px solid #ccd;border-radius:6px;background:#f6f7fb;font:inherit;color:#223;cursor:pointer}" +
    ".rk-bar button:disabled{color:#aab;cursor:default}" +
    ".rk-pager{display:flex;gap:6px;align-items:center;margin-left:auto}" +
    ".rk-view-title{font-weight:600;margin:4px 0}" +
    ".rk-view-status{color:#555;min-height:1.4em;margin:4px 0}" +
    ".rk-view-body,.rk-toc{max-height:70vh;overflow:auto;border:1px solid #dde;border-radius:4px}" +
    ".rk-page{position:relative}" +
    ".rk-page canvas{display:block;width:100%;height:auto}" +
    ".rk-hl{position:absolute;box-shadow:0 0 0 2px rgba(224,123,0,.7);border-radius:2px;pointer-events:none}" +
    ".rk-frame{display:block;width:100%;border:0}" +
    ".rk-toc{list-style:none;padding:0;margin:0}" +
    ".rk-toc li{display:flex;flex-wrap:wrap;gap:4px;padding:3px 4px;border-bottom:1px solid #eef}" +
    ".rk-toc .rk-toc-section{flex:1 1 12em;text-align:left;border:0;background:none;color:#2346c8}" +
    ".rk-toc-title{margin:6px 0}" +
    ".rk-passage{border-left:3px solid #2346c8;background:#f6f7fb;padding:8px}" +
    ".rk-passage-text{white-space:pre-wrap}";

  var LABELS = {
    en: {
      game: "Game",
      anyGame: "Any game (name it in the question)",
      question: "Your rules question",
      placeholder: "Ask a rules question…",
      ask: "Ask",
      newConversation: "New conversation",
      newConversationDone: "New conversation.",
      lookingUp: "Looking it up…",
      queued: "Waiting for the rules server: {n} question(s) ahead of yours…",
      checking: "checking…",
      answeredFor: "Game: {game}",
      followUp: "Follow-up",
      chat: "Chat",
      rulebook: "Rulebook",
      backToChat: "← Back to chat",
      contents: "Contents",
      previousPage: "Previous page",
      nextPage: "Next page",
      showInRulebook: "Show it in the rulebook",
      opening: "Opening the rulebook…",
      shownAsText: "The rulebook could not be shown here; this is its text.",
      notShown: "This part of the rulebook could not be shown.",
      chooseGame: "Choose a game to see its rulebook.",
      noContents: "Could not load the rulebook's contents.",
      section: "Section {n}",
      page: "Page {n}",
      pageOf: "Page {n} of {m}",
      pageShort: "p. {n}",
      retryIn: " Retry in {n} s.",
      serverAnswered: "The server answered {n}.",
      unreachable: "Could not reach the rules server.",
      failed: "The answer failed.",
      renderingWithheld: "(machine translation withheld)",
      wordByWord: "Word by word from the book's glossary (not a translation)",
    },
    zh: {
      game: "游戏",
      anyGame: "任意游戏（在问题中写明）",
      question: "你的规则问题",
      placeholder: "问一个规则问题…",
      ask: "提问",
      newConversation: "新对话",
      newConversationDone: "已开始新对话。",
      lookingUp: "正在查找…",
      queued: "规则服务器繁忙：前面还有 {n} 个问题，请稍候…",
      checking: "核对中…",
      answeredFor: "游戏：{game}",
      followUp: "追问",
      chat: "对话",
      rulebook: "规则书",
      backToChat: "← 返回对话",
      contents: "目录",
      previousPage: "上一页",
      nextPage: "下一页",
      showInRulebook: "在规则书中查看",
      opening: "正在打开规则书…",
      shownAsText: "无法在此显示规则书原页，以下是其文字。",
      notShown: "无法显示规则书的这一部分。",
      chooseGame: "选择一个游戏以查看其规则书。",
      noContents: "无法载入规则书目录。",
      section: "第 {n} 节",
      page: "第 {n} 页",
      pageOf: "第 {n} 页，共 {m} 页",
      pageShort: "第 {n} 页",
      retryIn: " 请在 {n} 秒后重试。",
      serverAnswered: "服务器返回了 {n}。",
      unreachable: "无法连接规则服务器。",
      failed: "回答失败。",
      renderingWithheld: "（机器译文未通过核对，不显示）",
      wordByWord: "逐词对照，取自本书术语表（不是译文）",
    },
  };

  /* The labels' language: data-lang, else the browser's first language we have labels for. */
  function labelLang(root) {
    var wanted = [root.getAttribute("data-lang") || ""].concat(navigator.languages || [navigator.language]);
    for (var i = 0; i < wanted.length; i++) {
      var code = String(wanted[i] || "").toLowerCase().split("-")[0];
      if (LABELS[code]) return code;
    }
    return "en";
  }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function addStyle() {
    if (document.getElementById("rk-style")) return;
    var style = el("style");
    style.id = "rk-style";
    style.textContent = STYLE;
    document.head.appendChild(style);
  }

  /* One server-sent event from its raw lines: {event, data}. */
  function parseEvent(raw) {
    var event = "message";
    var data = [];
    raw.split("\n").forEach(function (line) {
      if (line.indexOf("event:") === 0) event = line.slice(6).trim();
      else if (line.indexOf("data:") === 0) data.push(line.slice(5).replace(/^ /, ""));
    });
    return { event: event, data: data.length ? JSON.parse(data.join("\n")) : null };
  }

  /* A label with its {placeholders} filled in, in order. */
  function fill(template) {
    var values = Array.prototype.slice.call(arguments, 1);
    return template.replace(/\{\w+\}/g, function () {
      return values.shift();
    });
  }

  /* Stop a rulebook view that another has replaced: its late answers must not show. */
  function live(signal) {
    if (signal.aborted) throw new DOMException("replaced", "AbortError");
  }

  function percent(fraction) {
    return fraction * 100 + "%";
  }

  /* The widths a page image may be asked at (the server's bounds). */
  var PAGE_WIDTH = { min: 200, max: 2400, step: 100 };

  function Widget(root) {
    this.root = root;
    this.endpoint = (root.getAttribute("data-endpoint") || scriptOrigin).replace(/\/+$/, "");
    this.game = root.getAttribute("data-game") || "";
    this.apiKey = root.getAttribute("data-api-key") || "";
    this.labels = LABELS[labelLang(root)];
    this.games = []; /* {slug, title, aliases}, for titles and for spotting another game named */
    this.conversationId = null;
    this.conversationGame = null; /* the game the conversation is about */
    this.chosenGame = ""; /* the picker's game when the conversation began */
    this.controller = null;
    this.citations = [];
    this.quotes = []; /* the quotes of the rule text or answer shown */
    this.viewing = null; /* what the rulebook viewer shows: see openView */
    this.viewController = null;
    this.tocGame = null; /* the game whose contents are shown */
    this.tocAsked = null;
    this.chatScroll = null; /* the page's scroll position when the chat was left */
    this.build();
    this.loadGames();
  }

  Widget.prototype.headers = function (extra) {
    var headers = Object.assign({}, extra);
    if (this.apiKey) headers["X-API-Key"] = this.apiKey;
    return headers;
  };

  Widget.prototype.button = function (className, label, onClick) {
    var button = el("button", className, label);
    button.type = "button";
    button.addEventListener("click", onClick);
    return button;
  };

  Widget.prototype.build = function () {
    var self = this;
    var labels = this.labels;
    addStyle();
    this.root.classList.add("rk");
    this.tabs = el("div", "rk-tabs");
    this.tabs.setAttribute("role", "tablist");
    this.chatTab = this.tabs.appendChild(
      this.button("rk-tab rk-tab-chat", labels.chat, function () {
        self.showTab(false);
      })
    );
    this.bookTab = this.tabs.appendChild(
      this.button("rk-tab rk-tab-book", labels.rulebook, function () {
        self.openBook();
      })
    );
    this.chatTab.setAttribute("role", "tab");
    this.bookTab.setAttribute("role", "tab");
    this.chat = el("div", "rk-chat");
    this.chat.setAttribute("role", "tabpanel");
    this.form = el("form", "rk-form");
    this.select = el("select", "rk-game");
    this.select.setAttribute("aria-label", labels.game);
    this.select.appendChild(el("option", null, labels.anyGame)).value = "";
    this.input = el("input", "rk-input");
    this.input.type = "text";
    this.input.setAttribute("aria-label", labels.question);
    this.input.placeholder = labels.placeholder;
    var ask = el("button", "rk-ask", labels.ask);
    ask.type = "submit";
    var reset = el("button", "rk-new", labels.newConversation);
    reset.type = "button";
    if (!this.game) this.form.appendChild(this.select);
    this.form.appendChild(this.input);
    this.form.appendChild(ask);
    this.form.appendChild(reset);
    this.status = el("div", "rk-status");
    this.status.setAttribute("role", "status");
    this.question = el("div", "rk-question");
    this.followUp = el("div", "rk-follow-up", labels.followUp);
    this.followUp.hidden = true;
    this.answered = el("div", "rk-answered");
    this.answered.hidden = true;
    this.answer = el("div", "rk-answer");
    this.answer.setAttribute("aria-live", "polite");
    this.rule = el("div", "rk-rule");
    this.rule.setAttribute("aria-live", "polite");
    this.rule.hidden = true;
    this.draft = el("div", "rk-draft");
    this.draft.hidden = true;
    this.draft.appendChild(el("span", "rk-draft-label", labels.checking));
    this.draftText = this.draft.appendChild(el("span", "rk-draft-text"));
    this.list = el("ol", "rk-citations");
    [this.form, this.status, this.followUp, this.question, this.answered, this.answer, this.rule, this.draft, this.list].forEach(function (n) {
      self.chat.appendChild(n);
    });
    this.book = this.buildBook();
    this.root.appendChild(this.tabs);
    this.root.appendChild(this.chat);
    this.root.appendChild(this.book);
    this.showTab(false);
    this.form.addEventListener("submit", function (event) {
      event.preventDefault();
      var question = self.input.value.trim();
      if (question) self.ask(question);
    });
    reset.addEventListener("click", function () {
      if (!self.game) self.select.value = "";
      self.newConversation();
      self.clear();
      self.setStatus(labels.newConversationDone);
    });
    /* Another game (or "Any game"): the earlier questions are about something else. */
    this.select.addEventListener("change", function () {
      if (self.select.value !== self.chosenGame) self.newConversation();
    });
  };

  Widget.prototype.newConversation = function () {
    this.conversationId = null;
    this.conversationGame = null;
    this.chosenGame = this.select.value; /* what the picker showed when it began */
  };

  Widget.prototype.gameTitle = function (slug) {
    for (var i = 0; i < this.games.length; i++) {
      if (this.games[i].slug === slug) return this.games[i].title;
    }
    return slug;
  };

  Widget.prototype.showGame = function (slug) {
    this.answered.textContent = slug ? fill(this.labels.answeredFor, this.gameTitle(slug)) : "";
    this.answered.hidden = !slug;
  };

  Widget.prototype.loadGames = function () {
    var self = this;
    this.getJson(this.endpoint + "/v1/games")
      .then(function (body) {
        self.games = body.games;
        self.games.forEach(function (game) {
          self.select.appendChild(el("option", null, game.title)).value = game.slug;
        });
      })
      .catch(function () {
        /* the picker stays at "any game"; asking still works */
      });
  };

  /* GET `url` with the widget's headers (its key); rejects unless the server answered 2xx. */
  Widget.prototype.get = async function (url, accept, signal) {
    var response = await fetch(url, { headers: this.headers({ Accept: accept }), signal: signal });
    if (!response.ok) throw new Error(fill(this.labels.serverAnswered, response.status));
    return response;
  };

  Widget.prototype.getJson = async function (url, signal) {
    return (await this.get(url, "application/json", signal)).json();
  };

  Widget.prototype.gameUrl = function (game) {
    return this.endpoint + "/v1/games/" + encodeURIComponent(game);
  };

  Widget.prototype.setStatus = function (text, isError) {
    this.status.textContent = text || "";
    this.status.classList.toggle("rk-error", !!isError);
  };

  Widget.prototype.clear = function () {
    this.question.textContent = "";
    this.followUp.hidden = true;
    this.showGame(null);
    this.answer.textContent = "";
    this.clearProgress();
    this.list.textContent = "";
    this.citations = [];
  };

  /* Forget what was shown while the answer was on its way: the rule text and the draft. */
  Widget.prototype.clearProgress = function () {
    this.rule.textContent = "";
    this.rule.hidden = true;
    this.draftText.textContent = "";
    this.draft.hidden = true;
    this.quotes = [];
  };

  Widget.prototype.ask = async function (question) {
    if (this.controller) this.controller.abort();
    var controller = new AbortController();
    this.controller = controller;
    this.clear();
    this.question.textContent = question;
    this.setStatus(this.labels.lookingUp);
    var body = { question: question };
    var game = this.game || this.select.value;
    if (game) body.game = game;
    if (this.conversationId) body.conversation_id = this.conversationId;
    try {
      var response = await fetch(this.endpoint + "/v1/ask/stream", {
        method: "POST",
        headers: this.headers({ Accept: "text/event-stream", "Content-Type": "application/json" }),
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (!response.ok) {
        var error = await response.json().catch(function () {
          return null;
        });
        var wait = response.headers.get("Retry-After");
        this.setStatus(this.errorText(error, response.status) + (wait ? fill(this.labels.retryIn, wait) : ""), true);
        return;
      }
      await this.read(response.body.getReader(), controller);
    } catch (err) {
      if (err && err.name === "AbortError") return;
      this.setStatus(this.labels.unreachable, true);
    } finally {
      if (this.controller === controller) this.controller = null;
    }
  };

  Widget.prototype.read = async function (reader, controller) {
    var decoder = new TextDecoder();
    var buffer = "";
    for (;;) {
      var chunk = await reader.read();
      if (chunk.done || controller.signal.aborted) break;
      buffer += decoder.decode(chunk.value, { stream: true }).replace(/\r\n/g, "\n");
      var end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        var raw = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (raw.trim()) this.handle(parseEvent(raw));
      }
    }
  };

  Widget.prototype.errorText = function (body, status) {
    if (body && body.error && body.error.message) return body.error.message;
    return fill(this.labels.serverAnswered, status);
  };

  Widget.prototype.handle = function (message) {
    var data = message.data;
    if (message.event === "queued") {
      this.setStatus(fill(this.labels.queued, data.position));
    } else if (message.event === "quotes") {
      this.setStatus("");
      this.showRule(data);
    } else if (message.event === "token") {
      this.setStatus("");
      this.draft.hidden = false;
      this.draftText.appendChild(document.createTextNode(data.text));
    } else if (message.event === "citations") {
      this.conversationId = data.conversation_id || this.conversationId;
      this.conversationGame = data.game;
      this.followUp.hidden = !data.follows_up; /* the server's reading of the question */
      this.showAnswer(data);
    } else if (message.event === "error") {
      /* The rule text stays (it is the rulebook's own); an unchecked draft does not. */
      this.draftText.textContent = "";
      this.draft.hidden = true;
      var wait = data && data.error && data.error.retry_after_s;
      var text = data && data.error ? data.error.message : this.labels.failed;
      this.setStatus(text + (wait ? fill(this.labels.retryIn, wait) : ""), true);
    } else if (message.event === "done") {
      this.setStatus("");
    }
  };

  /* The rule text, before any conclusion: it replaces an earlier one (the model narrowed it
   * down). Its [n] markers and quoted sentences open the rulebook where they stand. */
  Widget.prototype.showRule = function (data) {
    var quotes = (data && data.quotes) || [];
    this.quotes = quotes;
    if (quotes.length) this.showGame(quotes[0].game);
    var text = data && data.text ? data.text : this.ruleText(quotes);
    this.rule.textContent = "";
    this.withQuotes(this.rule, text, quotes);
    this.rule.hidden = !text;
  };

  /* The rule text from the quotes themselves, for a server that sent no rendered text: a
   * withheld rendering's place says so, with the glossary's word-by-word line when there
   * is one. */
  Widget.prototype.ruleText = function (quotes) {
    var labels = this.labels;
    return quotes
      .map(function (q) {
        var label = String(q.section || "").split(" › ").pop();
        var line = "[" + q.n + "] " + label + (q.page ? " p. " + q.page : "") + ": “" + q.text + "”";
        if (q.translation) return line + "\n    " + q.translation;
        if (!q.translation_withheld) return line;
        line += "\n    " + labels.renderingWithheld;
        return q.word_by_word ? line + "\n    " + labels.wordByWord + ": " + q.word_by_word : line;
      })
      .join("\n");
  };

  /* Put `text` in `node` as withMarkers does, each quoted sentence (the first “…” holding
   * it) a link to where it stands in the rulebook, and the deciding one highlighted, so that
   * it is what the eye finds first. */
  Widget.prototype.withQuotes = function (node, text, cited) {
    var spans = [];
    this.quotes.forEach(function (quote) {
      var at = quote.text ? text.indexOf("“" + quote.text) : -1;
      var end = at >= 0 ? text.indexOf("”", at + quote.text.length) : -1;
      if (end >= 0) spans.push({ at: at, end: end + 1, quote: quote });
    });
    spans.sort(function (a, b) {
      return a.at - b.at || Number(!!b.quote.deciding) - Number(!!a.quote.deciding);
    });
    var shown = 0;
    for (var i = 0; i < spans.length; i++) {
      if (spans[i].at < shown) continue; /* the same sentence quoted from two passages */
      this.withMarkers(node, text.slice(shown, spans[i].at), cited);
      node.appendChild(this.quoteLink(text.slice(spans[i].at, spans[i].end), spans[i].quote));
      shown = spans[i].end;
    }
    this.withMarkers(node, text.slice(shown), cited);
  };

  Widget.prototype.quoteLink = function (text, quote) {
    var self = this;
    var link = el(quote.deciding ? "mark" : "span", quote.deciding ? "rk-deciding" : "rk-quote-link", text);
    link.tabIndex = 0;
    link.setAttribute("role", "button");
    link.title = this.labels.showInRulebook;
    link.addEventListener("click", function () {
      self.openCited(quote, true);
    });
    link.addEventListener("keydown", function (event) {
      if (event.key !== "Enter" && event.key !== " ") return;
      event.preventDefault();
      self.openCited(quote, true);
    });
    return link;
  };

  /* Put `text` in `node` as text nodes, each [n] marker a button opening entry n of `cited`. */
  Widget.prototype.withMarkers = function (node, text, cited) {
    var marker = /\[(\d+)\]/g;
    var last = 0;
    var match;
    while ((match = marker.exec(text)) !== null) {
      node.appendChild(document.createTextNode(text.slice(last, match.index)));
      var citation = this.find(cited, Number(match[1]));
      if (citation) {
        node.appendChild(this.citeButton("rk-marker", match[0], citation));
      } else {
        node.appendChild(document.createTextNode(match[0]));
      }
      last = marker.lastIndex;
    }
    node.appendChild(document.createTextNode(text.slice(last)));
  };

  /* The final answer (conclusion and rule text, checked) replaces all that was streamed; its
   * [n] markers become buttons. */
  Widget.prototype.showAnswer = function (data) {
    var self = this;
    this.citations = data.citations || [];
    this.clearProgress();
    this.quotes = data.quotes || [];
    this.showGame(data.game);
    this.answer.textContent = "";
    this.withQuotes(this.answer, data.answer || "", this.citations);
    this.list.textContent = "";
    this.citations.forEach(function (c) {
      var item = el("li");
      item.appendChild(self.citeButton("rk-cite", "[" + c.n + "] " + c.section, c));
      self.list.appendChild(item);
    });
  };

  Widget.prototype.find = function (cited, n) {
    for (var i = 0; i < cited.length; i++) {
      if (cited[i].n === n) return cited[i];
    }
    return null;
  };

  Widget.prototype.citeButton = function (className, label, citation) {
    var self = this;
    var button = this.button(className, label, function () {
      self.openCited(citation);
    });
    button.title = citation.section;
    return button;
  };

  /* Open the rulebook where a citation [n] stands (its deciding or first quoted sentence,
   * else its passage), or a quote itself (`exact`), leaving the chat as it is. */
  Widget.prototype.openCited = function (cited, exact) {
    var quote = exact ? cited : null;
    if (!exact) {
      this.quotes.forEach(function (q) {
        if (q.n === cited.n && (!quote || (q.deciding && !quote.deciding))) quote = q;
      });
    }
    var at = quote || cited;
    this.showTab(true);
    this.openView({
      game: at.game,
      page: quote ? quote.page : null,
      section: at.chunk_id,
      quote: quote ? quote.text : "",
      title: at.section,
      text: at.text,
    });
  };

  /* Show the chat, or the rulebook; the chat comes back where the reader left it. */
  Widget.prototype.showTab = function (book) {
    if (book && !this.chat.hidden) this.chatScroll = [window.scrollX, window.scrollY];
    var back = !book && !this.book.hidden;
    this.chat.hidden = book;
    this.book.hidden = !book;
    this.chatTab.setAttribute("aria-selected", String(!book));
    this.bookTab.setAttribute("aria-selected", String(book));
    if (back && this.chatScroll) window.scrollTo(this.chatScroll[0], this.chatScroll[1]);
  };

  /* The Rulebook tab: the table of contents, or a viewer showing one page or section. */
  Widget.prototype.buildBook = function () {
    var self = this;
    var labels = this.labels;
    var book = el("div", "rk-book");
    book.setAttribute("role", "tabpanel");
    this.toc = book.appendChild(el("div", "rk-contents"));
    this.viewer = book.appendChild(el("div", "rk-viewer"));
    this.viewer.hidden = true;
    var bar = this.viewer.appendChild(el("div", "rk-bar"));
    bar.appendChild(
      this.button("rk-back", labels.backToChat, function () {
        self.showTab(false);
      })
    );
    bar.appendChild(
      this.button("rk-to-contents", labels.contents, function () {
        self.showContents(self.viewing.game);
      })
    );
    this.pager = bar.appendChild(el("div", "rk-pager"));
    this.previousPage = this.pager.appendChild(
      this.button("rk-previous", "‹", function () {
        self.turn(-1);
      })
    );
    this.pageLabel = this.pager.appendChild(el("span", "rk-page-label"));
    this.nextPage = this.pager.appendChild(
      this.button("rk-next", "›", function () {
        self.turn(1);
      })
    );
    this.previousPage.setAttribute("aria-label", labels.previousPage);
    this.nextPage.setAttribute("aria-label", labels.nextPage);
    this.viewTitle = this.viewer.appendChild(el("div", "rk-view-title"));
    this.viewStatus = this.viewer.appendChild(el("div", "rk-view-status"));
    this.viewStatus.setAttribute("role", "status");
    this.viewBody = this.viewer.appendChild(el("div", "rk-view-body"));
    return book;
  };

  /* The Rulebook tab opened: what it last showed of the current game, else its contents. */
  Widget.prototype.openBook = function () {
    if (!this.book.hidden) return;
    var game = this.game || this.select.value || this.conversationGame || "";
    this.showTab(true);
    var shown = this.viewing ? this.viewing.game : this.tocGame;
    if (shown === null || (game && shown !== game)) this.showContents(game);
  };

  /* The table of contents of `game`, each section opening its view and each page its image;
   * a game picker above it when the widget is not fixed to one game. */
  Widget.prototype.showContents = async function (game) {
    var self = this;
    var labels = this.labels;
    if (this.viewController) this.viewController.abort();
    this.viewing = null;
    this.viewer.hidden = true;
    this.toc.hidden = false;
    this.toc.textContent = "";
    this.tocGame = game;
    var asked = (this.tocAsked = {}); /* a later call replaces this one */
    if (!this.game) this.toc.appendChild(this.bookPicker(game));
    var status = this.toc.appendChild(el("div", "rk-view-status", game ? labels.opening : labels.chooseGame));
    if (!game) return;
    var contents;
    try {
      contents = await this.getJson(this.gameUrl(game) + "/contents");
    } catch (err) {
      if (this.tocAsked === asked) status.textContent = labels.noContents;
      return;
    }
    if (this.tocAsked !== asked) return;
    status.remove();
    this.toc.appendChild(el("h4", "rk-toc-title", contents.title));
    var list = this.toc.appendChild(el("ol", "rk-toc"));
    var depth = Math.min.apply(
      null,
      contents.sections.map(function (section) {
        return section.path.length;
      })
    );
    contents.sections.forEach(function (section) {
      var item = list.appendChild(el("li"));
      item.style.paddingLeft = Math.min(section.path.length - depth, 3) + "em";
      var name = section.path[section.path.length - 1] || section.title;
      item.appendChild(
        self.button("rk-toc-section", section.number + ". " + name, function () {
          self.openView({ game: contents.game, section: String(section.number), title: section.title });
        })
      );
      (contents.has_pages ? section.pages : []).forEach(function (page) {
        item.appendChild(
          self.button("rk-toc-page", fill(labels.pageShort, page), function () {
            self.openView({ game: contents.game, page: page });
          })
        );
      });
    });
  };

  Widget.prototype.bookPicker = function (game) {
    var self = this;
    var picker = el("select", "rk-book-game");
    picker.setAttribute("aria-label", this.labels.game);
    picker.appendChild(el("option", null, "—")).value = "";
    this.games.forEach(function (g) {
      picker.appendChild(el("option", null, g.title)).value = g.slug;
    });
    picker.value = game;
    picker.addEventListener("change", function () {
      self.showContents(picker.value);
    });
    return picker;
  };

  /* Show a page (target.page) or else a section (target.section: a chunk id or a section
   * number) of target.game, with the sentence target.quote highlighted. The passage as text
   * (target.text) shows while it comes, and should it fail, the section's text stays. */
  Widget.prototype.openView = async function (target) {
    var labels = this.labels;
    if (this.viewController) this.viewController.abort();
    var controller = new AbortController();
    this.viewController = controller;
    this.viewing = target;
    this.toc.hidden = true;
    this.viewer.hidden = false;
    this.pager.hidden = !target.page;
    this.pageLabel.textContent = target.page ? fill(labels.page, target.page) : "";
    this.viewTitle.textContent = target.page ? target.title || "" : ""; /* a section view has its own */
    this.viewStatus.textContent = labels.opening;
    this.viewBody.textContent = "";
    this.viewBody.scrollTop = 0;
    if (target.text) this.viewBody.appendChild(this.passageNode(target.title, null, target.page, target.text, target.quote));
    try {
      await (target.page ? this.showPage(target, controller.signal) : this.showSection(target, controller.signal));
      this.viewStatus.textContent = "";
    } catch (err) {
      if (!controller.signal.aborted) await this.showPassage(target, controller.signal);
    }
  };

  Widget.prototype.turn = function (step) {
    this.openView({ game: this.viewing.game, page: this.viewing.page + step });
  };

  /* The page image (drawn by the server with the sentence highlighted), scaled to the panel,
   * scrolled so that the highlight shows; outlined boxes mark it for the eye. */
  Widget.prototype.showPage = async function (target, signal) {
    var url = this.gameUrl(target.game) + "/pages/" + target.page;
    if (target.quote) url += "?quote=" + encodeURIComponent(target.quote);
    var info = await this.getJson(url, signal);
    live(signal);
    this.pageLabel.textContent = fill(this.labels.pageOf, info.page, info.pages);
    this.previousPage.disabled = info.page <= 1;
    this.nextPage.disabled = info.page >= info.pages;
    if (!target.title) this.viewTitle.textContent = info.title;
    var image = new URL(info.image, url);
    image.searchParams.set("width", String(this.imageWidth()));
    var blob = await (await this.get(image.href, "image/png", signal)).blob();
    var bitmap = await createImageBitmap(blob);
    live(signal);
    var figure = el("div", "rk-page");
    var canvas = figure.appendChild(el("canvas"));
    canvas.width = bitmap.width;
    canvas.height = bitmap.height;
    canvas.getContext("2d").drawImage(bitmap, 0, 0);
    bitmap.close();
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", info.title + ", " + fill(this.labels.page, info.page) + (target.quote ? ": " + target.quote : ""));
    var boxes = info.highlights.map(function (box) {
      var mark = figure.appendChild(el("div", "rk-hl"));
      mark.style.left = percent(box.x0);
      mark.style.top = percent(box.top);
      mark.style.width = percent(box.x1 - box.x0);
      mark.style.height = percent(box.bottom - box.top);
      return mark;
    });
    this.viewBody.textContent = "";
    this.viewBody.appendChild(figure);
    this.reveal(
      boxes.map(function (box) {
        return box.getBoundingClientRect();
      })
    );
  };

  /* The width to ask a page image at: the panel's in device pixels, rounded up to a step so
   * that panels of about the same width share the server's cached image. */
  Widget.prototype.imageWidth = function () {
    var wanted = (this.viewBody.clientWidth || 800) * (window.devicePixelRatio || 1);
    var stepped = Math.ceil(wanted / PAGE_WIDTH.step) * PAGE_WIDTH.step;
    return Math.max(PAGE_WIDTH.min, Math.min(PAGE_WIDTH.max, stepped));
  };

  /* The section as the server lays it out, in a frame that runs no script (same origin, so
   * that its height and the marked sentence can be read), scrolled to the sentence. */
  Widget.prototype.showSection = async function (target, signal) {
    var url = this.gameUrl(target.game) + "/sections/" + encodeURIComponent(target.section) + "/view";
    if (target.quote) url += "?quote=" + encodeURIComponent(target.quote);
    var html = await (await this.get(url, "text/html", signal)).text();
    live(signal);
    var frame = el("iframe", "rk-frame");
    frame.setAttribute("sandbox", "allow-same-origin");
    frame.title = target.title || "";
    frame.hidden = true;
    var loaded = new Promise(function (resolve) {
      frame.addEventListener("load", resolve, { once: true });
    });
    frame.srcdoc = html;
    this.viewBody.appendChild(frame);
    await loaded;
    live(signal);
    var page = frame.contentDocument;
    while (this.viewBody.firstChild !== frame) this.viewBody.removeChild(this.viewBody.firstChild);
    frame.hidden = false;
    frame.style.height = page.documentElement.scrollHeight + "px";
    var at = frame.getBoundingClientRect();
    var marks = Array.prototype.slice.call(page.querySelectorAll("mark")); /* the quote, in pieces when it spans paragraphs */
    this.reveal(
      marks.map(function (mark) {
        var box = mark.getBoundingClientRect();
        return { top: at.top + box.top, bottom: at.top + box.bottom };
      })
    );
  };

  /* Scroll the panel so that the boxes (viewport rectangles) show together when they fit,
   * centred, else from the first; and bring the viewer into the page's view. */
  Widget.prototype.reveal = function (boxes) {
    var body = this.viewBody;
    var top = Infinity;
    var bottom = -Infinity;
    boxes.forEach(function (box) {
      top = Math.min(top, box.top);
      bottom = Math.max(bottom, box.bottom);
    });
    if (boxes.length) {
      var offset = body.scrollTop - body.getBoundingClientRect().top - body.clientTop;
      var room = body.clientHeight;
      var height = bottom - top;
      body.scrollTop = height < room ? top + offset - (room - height) / 2 : top + offset - 8;
    }
    this.viewer.scrollIntoView({ block: "nearest" });
  };

  /* When the page or section view cannot be had: the passage as text, from the rulebook
   * view's JSON, else the text the view was opened with. */
  Widget.prototype.showPassage = async function (target, signal) {
    this.viewStatus.textContent = target.text ? this.labels.shownAsText : this.labels.notShown;
    if (!target.section) return;
    try {
      var section = await this.getJson(this.gameUrl(target.game) + "/sections/" + encodeURIComponent(target.section), signal);
    } catch (err) {
      return;
    }
    if (signal.aborted) return;
    this.viewStatus.textContent = this.labels.shownAsText;
    this.viewBody.textContent = "";
    this.viewBody.appendChild(this.passageNode(section.section_path, section.number, section.page, section.text, target.quote));
  };

  /* A passage as text, with where it is (its section's number in the table of contents and
   * its page, when known) and the quoted sentence marked. */
  Widget.prototype.passageNode = function (title, number, page, text, quote) {
    var labels = this.labels;
    var passage = el("section", "rk-passage");
    passage.appendChild(el("h4", "rk-passage-title", title));
    var where = [];
    if (number) where.push(fill(labels.section, number));
    if (page) where.push(fill(labels.page, page));
    if (where.length) passage.appendChild(el("div", "rk-passage-where", where.join(" · ")));
    var body = passage.appendChild(el("div", "rk-passage-text"));
    var at = quote ? text.indexOf(quote) : -1;
    if (at < 0) {
      body.textContent = text;
      return passage;
    }
    body.appendChild(document.createTextNode(text.slice(0, at)));
    body.appendChild(el("mark", "rk-passage-quote", quote));
    body.appendChild(document.createTextNode(text.slice(at + quote.length)));
    return passage;
  };

  function mountAll() {
    var roots = document.querySelectorAll("[data-rulekeeper]");
    for (var i = 0; i < roots.length; i++) {
      if (!roots[i].rulekeeper) roots[i].rulekeeper = new Widget(roots[i]);
    }
  }

  window.Rulekeeper = { mount: mountAll };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", mountAll);
  else mountAll();
})();
