/*
 * Rulekeeper widget: ask rules questions on any page; citations open the rulebook passage.
 * Quote first: the rule text shows as soon as it is found, the conclusion's draft streams
 * in dimmed while it is being checked, and the final, checked answer replaces both.
 * No build step, no dependencies.
 *
 *   <div data-rulekeeper data-game="suros"></div>
 *   <script src="https://rules.example.org/widget.js" defer></script>
 *
 * Options (data attributes on the container): data-endpoint (the API's origin; default:
 * where this script came from), data-game (fix the game; default: a game picker),
 * data-api-key (when the server requires a key: a publishable key bound to this page's
 * origin, never a secret key). A page on another origin must be in the server's CORS
 * allow-list (a publishable key's origins are).
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
    ".rk-answer,.rk-rule{white-space:pre-wrap}" +
    ".rk-draft{color:#666;font-style:italic;white-space:pre-wrap;margin-top:8px}" +
    ".rk-draft-label{font-size:.85em;font-style:normal;color:#888;margin-right:.4em}" +
    ".rk-marker{border:0;background:#e8ecff;border-radius:4px;padding:0 3px;cursor:pointer;font:inherit;color:#223}" +
    ".rk-citations{padding-left:1.2em}" +
    ".rk-cite{border:0;background:none;color:#2346c8;cursor:pointer;text-align:left;font:inherit;padding:0}" +
    ".rk-passage{border-left:3px solid #2346c8;background:#f6f7fb;padding:8px;margin-top:8px}" +
    ".rk-passage-text{white-space:pre-wrap}";

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

  function errorMessage(body, response) {
    if (body && body.error && body.error.message) return body.error.message;
    return "The server answered " + response.status + ".";
  }

  function Widget(root) {
    this.root = root;
    this.endpoint = (root.getAttribute("data-endpoint") || scriptOrigin).replace(/\/+$/, "");
    this.game = root.getAttribute("data-game") || "";
    this.apiKey = root.getAttribute("data-api-key") || "";
    this.conversationId = null;
    this.controller = null;
    this.citations = [];
    this.quoted = [];
    this.build();
    if (!this.game) this.loadGames();
  }

  Widget.prototype.headers = function (extra) {
    var headers = Object.assign({}, extra);
    if (this.apiKey) headers["X-API-Key"] = this.apiKey;
    return headers;
  };

  Widget.prototype.build = function () {
    var self = this;
    addStyle();
    this.root.classList.add("rk");
    this.form = el("form", "rk-form");
    this.select = el("select", "rk-game");
    this.select.setAttribute("aria-label", "Game");
    this.select.appendChild(el("option", null, "Any game (name it in the question)")).value = "";
    this.input = el("input", "rk-input");
    this.input.type = "text";
    this.input.setAttribute("aria-label", "Your rules question");
    this.input.placeholder = "Ask a rules question…";
    var ask = el("button", "rk-ask", "Ask");
    ask.type = "submit";
    var reset = el("button", "rk-new", "New conversation");
    reset.type = "button";
    if (!this.game) this.form.appendChild(this.select);
    this.form.appendChild(this.input);
    this.form.appendChild(ask);
    this.form.appendChild(reset);
    this.status = el("div", "rk-status");
    this.status.setAttribute("role", "status");
    this.question = el("div", "rk-question");
    this.answer = el("div", "rk-answer");
    this.answer.setAttribute("aria-live", "polite");
    this.rule = el("div", "rk-rule");
    this.rule.setAttribute("aria-live", "polite");
    this.rule.hidden = true;
    this.draft = el("div", "rk-draft");
    this.draft.hidden = true;
    this.draft.appendChild(el("span", "rk-draft-label", "checking…"));
    this.draftText = this.draft.appendChild(el("span", "rk-draft-text"));
    this.list = el("ol", "rk-citations");
    this.passage = el("section", "rk-passage");
    this.passage.hidden = true;
    [this.form, this.status, this.question, this.answer, this.rule, this.draft, this.list, this.passage].forEach(
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
      self.conversationId = null;
      self.clear();
      self.setStatus("New conversation.");
    });
  };

  Widget.prototype.loadGames = function () {
    var self = this;
    fetch(this.endpoint + "/v1/games", { headers: this.headers({ Accept: "application/json" }) })
      .then(function (response) {
        return response.ok ? response.json() : null;
      })
      .then(function (body) {
        (body ? body.games : []).forEach(function (game) {
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
    this.setStatus("Looking it up…");
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
        this.setStatus(errorMessage(error, response) + (wait ? " Retry in " + wait + " s." : ""), true);
        return;
      }
      await this.read(response.body.getReader(), controller);
    } catch (err) {
      if (err && err.name === "AbortError") return;
      this.setStatus("Could not reach the rules server.", true);
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

  Widget.prototype.handle = function (message) {
    var data = message.data;
    if (message.event === "quotes") {
      this.setStatus("");
      this.showRule(data);
    } else if (message.event === "token") {
      this.setStatus("");
      this.draft.hidden = false;
      this.draftText.appendChild(document.createTextNode(data.text));
    } else if (message.event === "citations") {
      this.conversationId = data.conversation_id || this.conversationId;
      this.showAnswer(data);
    } else if (message.event === "error") {
      /* The rule text stays (it is the rulebook's own); an unchecked draft does not. */
      this.draftText.textContent = "";
      this.draft.hidden = true;
      this.setStatus(data && data.error ? data.error.message : "The answer failed.", true);
    } else if (message.event === "done") {
      this.setStatus("");
    }
  };

  /* The rule text, before any conclusion: it replaces an earlier one (the model narrowed it
   * down). Its [n] markers open the quoted passage. */
  Widget.prototype.showRule = function (data) {
    var quotes = (data && data.quotes) || [];
    this.quoted = quotes.map(function (q) {
      return { n: q.n, game: q.game, chunk_id: q.chunk_id, section: q.section, text: q.text };
    });
    var text = data && data.text ? data.text : this.ruleText(quotes);
    this.rule.textContent = "";
    this.withMarkers(this.rule, text, this.quoted);
    this.rule.hidden = !text;
  };

  /* The rule text from the quotes themselves, for a server that sent no rendered text. */
  Widget.prototype.ruleText = function (quotes) {
    return quotes
      .map(function (q) {
        var label = String(q.section || "").split(" › ").pop();
        var line = "[" + q.n + "] " + label + (q.page ? " p. " + q.page : "") + ": “" + q.text + "”";
        return q.translation ? line + "\n    " + q.translation : line;
      })
      .join("\n");
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
    this.answer.textContent = "";
    this.withMarkers(this.answer, data.answer || "", this.citations);
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
    this.renderPassage(citation.section, null, citation.text);
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
        if (section) self.renderPassage(section.section_path, section.page, section.text);
      })
      .catch(function () {
        /* keep the citation's own text */
      });
  };

  Widget.prototype.renderPassage = function (title, page, text) {
    var self = this;
    this.passage.textContent = "";
    var close = el("button", "rk-close", "Close");
    close.type = "button";
    close.addEventListener("click", function () {
      self.passage.hidden = true;
    });
    this.passage.appendChild(el("h4", "rk-passage-title", title));
    if (page) this.passage.appendChild(el("div", "rk-passage-page", "Page " + page));
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
