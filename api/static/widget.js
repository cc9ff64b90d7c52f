/*
 * Rulekeeper widget: ask rules questions on any page; citations open the rulebook passage.
 * Quote first: the rule text shows as soon as it is found, the sentence that decides the
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
 * Conversations: a follow-up keeps the earlier question's context; choosing another game
 * (or "Any game"), naming another game, asking a question that reads as a new one, or "New
 * conversation" starts afresh, so an earlier topic never colours a new one.
 *
 * Security: every text from the server (answers, rulebook passages, error messages) is put
 * in the page as text nodes (textContent), never parsed as HTML.
 */
(function () {
  "use strict";

  var script = document.currentScript;
  var scriptOrigin = script && script.src ? new URL(script.src, location.href).origin : location.origin;

  var STYLE =
    ".rk{font:15px/1.45 system-ui,sans-serif;border:1px solid #ccd;border-radius:8px;padding:12px;max-width:46em}" +
    ".rk form{display:flex;gap:6px;flex-wrap:wrap}" +
    ".rk input{flex:1 1 16em;padding:6px}" +
    ".rk-status{color:#555;min-height:1.4em;margin:6px 0}" +
    ".rk-status.rk-error{color:#a00}" +
    ".rk-question{font-weight:600;margin:6px 0}" +
    ".rk-follow-up{font-size:.8em;color:#555;margin-top:6px}" +
    ".rk-answered{font-size:.9em;color:#2346c8;margin:0 0 6px}" +
    ".rk-passage-where{font-size:.9em;color:#555}" +
    ".rk-answer,.rk-rule{white-space:pre-wrap}" +
    ".rk-draft{color:#666;font-style:italic;white-space:pre-wrap;margin-top:8px}" +
    ".rk-draft-label{font-size:.85em;font-style:normal;color:#888;margin-right:.4em}" +
    ".rk-deciding{background:#fff3b0;color:inherit;font-weight:600;padding:0 2px}" +
    ".rk-marker{border:0;background:#e8ecff;border-radius:4px;padding:0 3px;cursor:pointer;font:inherit;color:#223}" +
    ".rk-citations{padding-left:1.2em}" +
    ".rk-cite{border:0;background:none;color:#2346c8;cursor:pointer;text-align:left;font:inherit;padding:0}" +
    ".rk-passage{border-left:3px solid #2346c8;background:#f6f7fb;padding:8px;margin-top:8px}" +
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
      close: "Close",
      section: "Section {n}",
      page: "Page {n}",
      retryIn: " Retry in {n} s.",
      serverAnswered: "The server answered {n}.",
      unreachable: "Could not reach the rules server.",
      failed: "The answer failed.",
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
      close: "关闭",
      section: "第 {n} 节",
      page: "第 {n} 页",
      retryIn: " 请在 {n} 秒后重试。",
      serverAnswered: "服务器返回了 {n}。",
      unreachable: "无法连接规则服务器。",
      failed: "回答失败。",
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

  /* Words that tie a question to the one before it ("and if…", "what about it?"): without
   * them a question is a new topic and is asked without the earlier context. */
  var FOLLOW_UP =
    /^\s*(and|but|so|then|also|or|what about|how about|what if|if so|if not)\b|\b(it|its|that|this|these|those|they|them|their|next|after that|afterwards|instead|again|else|too)\b|^\s*(那|那么|还有|如果|然后|另外|而且|但是?)|(它|这个|那个|他们|其)/i;

  function looksLikeFollowUp(question) {
    return FOLLOW_UP.test(question) || question.trim().split(/\s+/).length <= 3;
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

  /* The text of the quote marked as deciding, or "" when none is. */
  function deciding(quotes) {
    for (var i = 0; i < quotes.length; i++) {
      if (quotes[i].deciding) return quotes[i].text;
    }
    return "";
  }

  /* A label with its one {placeholder} filled in. */
  function fill(template, value) {
    return template.replace(/\{\w+\}/, value);
  }

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
    this.quoted = [];
    this.build();
    this.loadGames();
  }

  Widget.prototype.headers = function (extra) {
    var headers = Object.assign({}, extra);
    if (this.apiKey) headers["X-API-Key"] = this.apiKey;
    return headers;
  };

  Widget.prototype.build = function () {
    var self = this;
    var labels = this.labels;
    addStyle();
    this.root.classList.add("rk");
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
    this.passage = el("section", "rk-passage");
    this.passage.hidden = true;
    [this.form, this.status, this.followUp, this.question, this.answered, this.answer, this.rule, this.draft, this.list, this.passage].forEach(
      function (n) {
        self.root.appendChild(n);
      }
    );
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

  /* The conversation to continue with `question`, or null for a new topic: a question that
   * does not read as a follow-up, or that names a game other than the conversation's. */
  Widget.prototype.continuing = function (question) {
    if (!this.conversationId || !looksLikeFollowUp(question)) return null;
    var folded = question.toLowerCase();
    var conversationGame = this.conversationGame;
    var other = this.games.some(function (game) {
      return (
        game.slug !== conversationGame &&
        [game.title, game.slug].concat(game.aliases || []).some(function (name) {
          return name && folded.indexOf(String(name).toLowerCase()) >= 0;
        })
      );
    });
    return other ? null : this.conversationId;
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
    fetch(this.endpoint + "/v1/games", { headers: this.headers({ Accept: "application/json" }) })
      .then(function (response) {
        return response.ok ? response.json() : null;
      })
      .then(function (body) {
        self.games = body ? body.games : [];
        self.games.forEach(function (game) {
          self.select.appendChild(el("option", null, game.title)).value = game.slug;
        });
      })
      .catch(function () {
        /* the picker stays at "any game"; asking still works */
      });
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
    this.passage.hidden = true;
    this.passage.textContent = "";
    this.citations = [];
  };

  /* Forget what was shown while the answer was on its way: the rule text and the draft. */
  Widget.prototype.clearProgress = function () {
    this.rule.textContent = "";
    this.rule.hidden = true;
    this.draftText.textContent = "";
    this.draft.hidden = true;
    this.quoted = [];
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
    var conversationId = this.continuing(question);
    this.followUp.hidden = !conversationId;
    if (conversationId) body.conversation_id = conversationId;
    else this.newConversation();
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
   * down). Its [n] markers open the quoted passage. */
  Widget.prototype.showRule = function (data) {
    var quotes = (data && data.quotes) || [];
    this.quoted = quotes.map(function (q) {
      return { n: q.n, game: q.game, chunk_id: q.chunk_id, section: q.section, page: q.page, text: q.text };
    });
    if (quotes.length) this.showGame(quotes[0].game);
    var text = data && data.text ? data.text : this.ruleText(quotes);
    this.rule.textContent = "";
    this.withDeciding(this.rule, text, this.quoted, deciding(quotes));
    this.rule.hidden = !text;
  };

  /* The rule text from the quotes themselves, for a server that sent no rendered text. */
  Widget.prototype.ruleText = function (quotes) {
    return quotes
      .map(function (q) {
        var label = String(q.section || "").split(" › ").pop();
        var line = "[" + q.n + "] " + label + (q.page ? " p. " + q.page : "") + ": “" + q.text + "”";
        if (q.translation) return line + "\n    " + q.translation;
        return q.translation_withheld ? line + "\n    (machine translation withheld)" : line;
      })
      .join("\n");
  };

  /* Put `text` in `node` as withMarkers does, the deciding sentence's quoted text (the
   * first “…” holding it) set apart and highlighted, so that it is what the eye finds first. */
  Widget.prototype.withDeciding = function (node, text, cited, sentence) {
    var at = sentence ? text.indexOf("“" + sentence) : -1;
    var end = at >= 0 ? text.indexOf("”", at + sentence.length) : -1;
    if (end < 0) {
      this.withMarkers(node, text, cited);
      return;
    }
    this.withMarkers(node, text.slice(0, at), cited);
    node.appendChild(el("mark", "rk-deciding", text.slice(at, end + 1)));
    this.withMarkers(node, text.slice(end + 1), cited);
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
    this.showGame(data.game);
    this.answer.textContent = "";
    this.withDeciding(this.answer, data.answer || "", this.citations, deciding(data.quotes || []));
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
    var button = el("button", className, label);
    button.type = "button";
    button.title = citation.section;
    button.addEventListener("click", function () {
      self.openPassage(citation);
    });
    return button;
  };

  /* Show the cited passage at once, then its page and full text from the rulebook view. */
  Widget.prototype.openPassage = function (citation) {
    var self = this;
    this.renderPassage(citation.section, null, citation.page, citation.text);
    var url =
      this.endpoint +
      "/v1/games/" +
      encodeURIComponent(citation.game) +
      "/sections/" +
      encodeURIComponent(citation.chunk_id);
    fetch(url, { headers: this.headers({ Accept: "application/json" }) })
      .then(function (response) {
        return response.ok ? response.json() : null;
      })
      .then(function (section) {
        if (section) self.renderPassage(section.section_path, section.number, section.page, section.text);
      })
      .catch(function () {
        /* keep the citation's own text */
      });
  };

  /* The passage with where it is: its section path, the section's number in the rulebook's
   * table of contents and its page, when known. */
  Widget.prototype.renderPassage = function (title, number, page, text) {
    var self = this;
    var labels = this.labels;
    this.passage.textContent = "";
    var close = el("button", "rk-close", labels.close);
    close.type = "button";
    close.addEventListener("click", function () {
      self.passage.hidden = true;
    });
    this.passage.appendChild(el("h4", "rk-passage-title", title));
    var where = [];
    if (number) where.push(fill(labels.section, number));
    if (page) where.push(fill(labels.page, page));
    if (where.length) this.passage.appendChild(el("div", "rk-passage-where", where.join(" · ")));
    this.passage.appendChild(el("div", "rk-passage-text", text));
    this.passage.appendChild(close);
    this.passage.hidden = false;
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
