/**
 * The style and script of the HTML export (`tiller export ID --html FILE`), inline in the page. The
 * script reads the session's events from the page's embedded JSON and renders the timeline on the
 * client: `tillerModel(data)` folds the events into rows (usable without a DOM), `tillerStart`
 * renders them lazily, a few hundred at a time as the reader scrolls, so a session of 100,000 events
 * opens at once.
 *
 * @since 0.1.0
 */

/**
 * The page's style sheet.
 *
 * @since 0.1.0
 * @category constants
 */
export const PAGE_STYLE = String.raw`
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2330; background: #f6f7f9; }
header { position: sticky; top: 0; z-index: 2; background: #fff; border-bottom: 1px solid #d8dce3; padding: 10px 16px; }
header h1 { font-size: 16px; margin: 0 0 4px; }
header .meta { color: #5b6474; font-size: 12px; }
.controls { display: flex; flex-wrap: wrap; gap: 6px 14px; align-items: center; margin-top: 8px; font-size: 12px; }
.controls input[type=search] { width: 260px; padding: 4px 6px; border: 1px solid #c4c9d2; border-radius: 4px; }
.controls label { white-space: nowrap; }
#kinds label { margin-right: 8px; }
.controls button { font-size: 12px; padding: 3px 8px; }
#count { color: #5b6474; }
#timeline { padding: 8px 16px 60vh; }
.lanes { display: grid; grid-template-columns: 64px minmax(0, 1fr) 300px; gap: 0 10px; font-size: 12px; color: #5b6474; padding: 0 0 4px; }
.row { display: grid; grid-template-columns: 64px minmax(0, 1fr) 300px; gap: 0 10px; align-items: start; padding: 3px 0; border-bottom: 1px solid #eceef2; }
.row .seq { font: 11px ui-monospace, monospace; color: #8a93a3; text-decoration: none; padding-top: 2px; }
.row .seq:hover { text-decoration: underline; }
.row .lane { background: #f0f3f9; border-left: 3px solid #c9d3e6; min-height: 100%; padding: 0 6px; font-size: 12px; }
.row.inbox .lane { background: #e8eefb; border-left-color: #6f8fd8; }
/* A row a link scrolls to stops below the sticky header (its height, kept in --tiller-header by the
   script; a generous default without it) and is marked, whether the page or the browser scrolled. */
.row { scroll-margin-top: var(--tiller-header, 12rem); }
.row.target, .row:target { outline: 2px solid #f5a524; outline-offset: -2px; background: #fff8e6; }
.d0 .main { font-weight: 600; font-size: 15px; }
.d0 { background: #fff; border-top: 2px solid #9aa5b8; margin-top: 10px; }
.d1 .main { padding-left: 14px; }
.d2 .main { padding-left: 30px; }
.toggle { cursor: pointer; user-select: none; }
.toggle::before { content: "\25be  "; color: #8a93a3; }
.toggle.closed::before { content: "\25b8  "; }
.badge { display: inline-block; font-size: 11px; font-weight: 600; border-radius: 3px; padding: 0 5px; margin-right: 6px; border: 1px solid transparent; vertical-align: 1px; }
.src-prompt .badge { background: #dff3e4; color: #17622d; border-color: #9fd5ad; }
.src-steer .badge { background: #fff0d6; color: #8a5300; border-color: #f0c27a; }
.src-context .badge { background: #ece4fb; color: #5a2ea6; border-color: #c2aef0; }
.src-tool-context .badge { background: #e2f1f8; color: #155a78; border-color: #9cc9de; }
.src-summary .badge { background: #fde7ef; color: #9b1c4a; border-color: #f0a6c0; }
.k-assistant .badge { background: #e7ebf3; color: #2d3a55; }
.k-reasoning .badge { background: #f1f1f1; color: #666; }
.k-reasoning pre { color: #666; font-style: italic; }
.k-tool .badge { background: #eef6ee; color: #2f6a2f; }
.k-tool.err .badge, .k-retry .badge, .k-failed .badge { background: #fde8e8; color: #a11; }
.k-hook .badge { background: #fff3c4; color: #7a5a00; }
.k-compaction .badge { background: #fde7ef; color: #9b1c4a; }
.k-turn-end .badge { background: #e5e8ee; color: #333; }
.reason-completed .badge { background: #dff3e4; color: #17622d; }
.reason-error .badge, .reason-aborted .badge, .reason-blocked .badge, .reason-interrupted .badge { background: #fde8e8; color: #a11; }
.stats { font-weight: 400; color: #5b6474; font-size: 12px; margin-left: 10px; }
pre { margin: 2px 0; white-space: pre-wrap; word-break: break-word; font: 12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, monospace; }
details > summary { cursor: pointer; color: #37507a; font-size: 12px; }
.note { color: #6b7485; font-size: 12px; }
.shadowed { border-left: 3px solid #f0a6c0; margin: 4px 0; padding-left: 8px; }
.empty { color: #8a93a3; padding: 20px; }
`

/**
 * The page's script: `tillerModel` (events to rows) and `tillerStart` (the lazy renderer).
 *
 * @since 0.1.0
 * @category constants
 */
export const PAGE_SCRIPT = String.raw`
"use strict";
function tillerText(content) {
  var out = [];
  for (var i = 0; i < (content || []).length; i++) {
    var b = content[i];
    if (b.type === "text" || b.type === "reasoning") out.push(b.text);
    else if (b.type === "tool-result") out.push(tillerText(b.content));
    else out.push("[" + b.type + "]");
  }
  return out.join("");
}
function tillerSourceLabel(source) {
  var parts = [source.kind];
  for (var k in source) if (k !== "kind" && typeof source[k] === "string") parts.push(source[k]);
  return parts.join(":");
}
function tillerReason(r) {
  if (r.kind === "blocked") return "blocked" + (r.message ? ": " + r.message : "");
  if (r.kind === "aborted") return "aborted (" + r.reason.kind + (r.reason.kind === "hook" ? ": " + r.reason.reason : "") + ")";
  if (r.kind === "error") return "error: " + r.error.message + " (" + r.error.code + ")";
  return r.kind;
}
function tillerDuration(ms) {
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
}
/** One line about any event (the shadowed events of a compaction marker). */
function tillerDescribe(e) {
  var d = e.data || {};
  switch (e.type) {
    case "user/message": return "[" + tillerSourceLabel(d.source) + "] " + tillerText(d.content);
    case "assistant/message": return "assistant: " + tillerText(d.message.content.filter(function (b) { return b.type === "text"; }));
    case "tool/result": return "tool result: " + tillerText(d.message.content);
    case "tool/call": return "tool call " + d.name + " " + d.arguments;
    default: return e.type + " " + JSON.stringify(d).slice(0, 300);
  }
}
/** The lower-case text a search looks in (computed on the first search). */
function tillerSearchText(row) {
  if (row.search === undefined) row.search = [row.label, row.text, row.result, row.note, row.source].join(" ").toLowerCase();
  return row.search;
}
/** Folds the events into timeline rows; needs no DOM. The chunks of a completed answer may be left
 * out of the events (the answer holds their content): links to their seqs find the answer. */
function tillerModel(data) {
  var model = tillerFold(data.header);
  model.feed(data.events);
  return model;
}
/** The fold of tillerModel, fed the events part by part: feed(events) appends rows; rows it changed
 * that an earlier part added (a turn's heading when the turn ends, a tool call when its result comes)
 * are listed in model.changed. */
function tillerFold(header) {
  var rows = [], bySeq = {}, eventAt = {}, changed = [];
  var lists = { "next-turn": [], "next-step": [] };
  var targetOf = {}, toolRows = {}, attempts = {}, sources = {};
  var turnRow = null, stepRow = null, turn = 0, step = 0, inStep = false, prev = null, compaction = null;
  var totals = { turns: 0, input: 0, output: 0 };
  // What each turn cost, as the exporter folded it from the log's usage.
  var costNode = typeof document !== "undefined" ? document.getElementById("tiller-cost") : null;
  var turnCosts = costNode ? JSON.parse(costNode.textContent) : {};
  function add(row) {
    row.i = rows.length;
    row.turn = turnRow !== null || row.kind === "turn" ? turn : 0;
    row.step = inStep ? step : 0;
    if (row.depth === undefined) row.depth = 2;
    if (row.lane === undefined) row.lane = "main";
    rows.push(row);
    for (var i = 0; i < row.seqs.length; i++) if (bySeq[row.seqs[i]] === undefined) bySeq[row.seqs[i]] = row.i;
    if (compaction !== null) compaction.inside.push(row.i);
    return row;
  }
  var model = { rows: rows, bySeq: bySeq, eventAt: eventAt, sources: [], totals: totals, changed: changed, lastSeq: -1, feed: feed };
  function feed(events) {
  changed.length = 0;
  for (var n = 0; n < events.length; n++) {
    var e = events[n], d = e.data || {};
    eventAt[e.seq] = e;
    model.lastSeq = e.seq;
    switch (e.type) {
      case "turn/start":
        turn = d.turn; step = 0; inStep = false; totals.turns++;
        turnRow = add({ kind: "turn", depth: 0, seqs: [e.seq], label: "Turn " + d.turn, start: e.time, input: 0, output: 0, steps: 0 });
        break;
      case "turn/end":
        inStep = false;
        if (turnRow) {
          changed.push(turnRow.i);
          turnRow.reason = d.reason.kind;
          turnRow.stats = tillerReason(d.reason) + " · " + turnRow.steps + " step" + (turnRow.steps === 1 ? "" : "s") + " · " +
            tillerDuration(e.time - turnRow.start) + " · " + turnRow.input + " in / " + turnRow.output + " out tokens" +
            (turnCosts[d.turn] ? " · " + turnCosts[d.turn] : "");
        }
        add({ kind: "turn-end", depth: 1, seqs: [e.seq], label: "turn " + d.turn + " ended", text: tillerReason(d.reason), cls: "reason-" + d.reason.kind });
        if (d.reason.kind === "blocked" || (d.reason.kind === "aborted" && d.reason.reason.kind === "hook")) {
          add({ kind: "hook", depth: 1, seqs: [e.seq], label: "hook", text: d.reason.kind === "blocked" ? "a pre-step listener blocked the turn" + (d.reason.message ? ": " + d.reason.message : "") : "a hook cancelled the turn: " + d.reason.reason.reason });
        }
        turnRow = null;
        break;
      case "step/start":
        step = d.step; inStep = true;
        if (turnRow) turnRow.steps = d.step;
        stepRow = add({ kind: "step", depth: 1, seqs: [e.seq], label: "Step " + d.turn + "." + d.step });
        break;
      case "step/end":
        inStep = false;
        break;
      case "user/message": {
        var replace = typeof e.surfaceOp === "object";
        var t = targetOf[d.id], kind = d.source.kind, cls, label;
        if (replace) { cls = "src-summary"; label = kind === "compaction" ? "compaction summary" : "replacement"; }
        else if (t && t.tool) { cls = "src-tool-context"; label = "tool context · " + tillerSourceLabel(d.source); }
        else if (kind === "user") { var steer = t && t.target === "next-step" && t.running; cls = steer ? "src-steer" : "src-prompt"; label = steer ? "steer" : "prompt"; }
        else { cls = "src-context"; label = "context · " + tillerSourceLabel(d.source); }
        var src = tillerSourceLabel(d.source);
        sources[src] = true;
        add({ kind: replace ? "compaction" : "message", seqs: [e.seq].concat(e.sourceEventSeqs || []), label: label, cls: cls, source: src,
          text: tillerText(d.content) + (replace ? "\n(replaces the history from seq " + e.surfaceOp.start + " to " + e.surfaceOp.end + ")" : "") });
        break;
      }
      case "request/header": {
        var h = d.header;
        add({ kind: "request", seqs: [e.seq], label: "model", text: h.provider + ":" + h.model + " (" + d.reason + ") · tools: " + (h.tools.map(function (x) { return x.name; }).join(", ") || "none") + (h.system ? "\nsystem: " + h.system : "") });
        if (d.reason === "change") add({ kind: "hook", seqs: [e.seq], label: "hook", text: "the request was changed: " + h.provider + ":" + h.model });
        break;
      }
      case "assistant/chunk": {
        var key = d.turn + "." + d.step + "." + d.attempt, a = attempts[key] || (attempts[key] = { seqs: [], blocks: {} });
        var c = d.chunk;
        a.seqs.push(e.seq);
        if (c.type === "block-start") a.blocks[c.index] = { block: c.block, text: "" };
        else if ((c.type === "text-delta" || c.type === "reasoning-delta") && a.blocks[c.index]) a.blocks[c.index].text += c.text;
        else if (c.type === "finish" && (c.finish.kind === "error" || c.finish.kind === "aborted")) {
          var partial = Object.keys(a.blocks).map(function (k) { return a.blocks[k].text; }).join("");
          add({ kind: "retry", cls: "k-failed", seqs: a.seqs.slice(), label: "request failed", text: "attempt " + d.attempt + ": " + c.finish.failure.message + " (" + c.finish.failure.code + ")" + (partial ? "\npartial output: " + partial : "") });
        }
        break;
      }
      case "assistant/message": {
        var m = d.message, seqs = [e.seq].concat(e.sourceEventSeqs || []);
        var reasoning = tillerText(m.content.filter(function (b) { return b.type === "reasoning"; }));
        var text = tillerText(m.content.filter(function (b) { return b.type === "text"; }));
        var calls = m.content.filter(function (b) { return b.type === "tool-call"; }).length;
        if (d.usage && turnRow) { turnRow.input += d.usage.inputTokens; turnRow.output += d.usage.outputTokens; }
        if (d.usage) { totals.input += d.usage.inputTokens; totals.output += d.usage.outputTokens; }
        if (reasoning) add({ kind: "reasoning", seqs: seqs, label: "reasoning", text: reasoning });
        var notes = [];
        if (calls) notes.push(calls + " tool call" + (calls === 1 ? "" : "s"));
        if (d.usage) notes.push(d.usage.inputTokens + " in / " + d.usage.outputTokens + " out tokens");
        if (d.attempt > 1) notes.push("attempt " + d.attempt);
        if (d.interrupted) notes.push("interrupted");
        if (text || !reasoning) add({ kind: "assistant", seqs: seqs, label: "assistant", text: text || (calls ? "" : "(no text)"), note: notes.join(" · ") });
        break;
      }
      case "tool/call":
        toolRows[d.callId] = add({ kind: "tool", seqs: [e.seq], label: "tool " + d.name, name: d.name, text: d.arguments, note: "call " + d.callId });
        break;
      case "tool/result": {
        var block = d.message.content[0], row = toolRows[block.toolCallId];
        if (typeof e.surfaceOp === "object") {
          add({ kind: "compaction", seqs: [e.seq].concat(e.sourceEventSeqs || []), label: "pruned", cls: "src-summary", text: "the result of " + ((row && row.name) || block.toolCallId) + " on the surface: " + tillerText(block.content) });
          break;
        }
        var resultText = tillerText(block.content);
        if (row) {
          changed.push(row.i);
          row.result = resultText; row.isError = block.isError; row.seqs.push(e.seq); bySeq[e.seq] = row.i;
          if (d.error) row.note += " · " + d.error.code;
          if (block.isError) row.cls = "err";
        } else {
          add({ kind: "tool", seqs: [e.seq], label: "tool result", text: "", result: resultText, isError: block.isError, cls: block.isError ? "err" : "" });
        }
        if (d.error && (d.error.code === "DENIED" || d.error.code === "PRE_HOOK_FAILED")) {
          add({ kind: "hook", seqs: [e.seq], label: "hook", text: "tool pre-hook " + (d.error.code === "DENIED" ? "denied " : "failed for ") + ((row && row.name) || block.toolCallId) + ": " + resultText });
        }
        break;
      }
      case "llm/retry":
        add({ kind: "retry", seqs: [e.seq], label: "retry", text: "attempt " + d.attempt + " failed: " + d.failure.message + " (" + d.failure.code + "); retrying in " + d.delayMs + " ms" });
        break;
      case "agent/inbox/spliced": {
        var list = lists[d.target], removed = [];
        if (e.seq >= (header.seedLength || 0) && list) removed = list.splice.apply(list, [d.start, d.removedCount || 0].concat(d.inserted));
        var tool = prev !== null && prev.type === "tool/result" && inStep;
        for (var j = 0; j < d.inserted.length; j++) targetOf[d.inserted[j].id] = { target: d.target, tool: tool, running: turnRow !== null };
        var what = !d.removedCount ? "inserted" : d.inserted.length === 0 ? (d.outcome === "canceled" ? "discarded" : "claimed") : "replaced";
        var shown = what === "inserted" ? d.inserted : removed;
        var srcs = shown.map(function (x) { return tillerSourceLabel(x.source); });
        add({ kind: "inbox", lane: "inbox", seqs: [e.seq], label: what + " · " + d.target, sources: srcs,
          text: shown.map(function (x) { return "[" + tillerSourceLabel(x.source) + "] " + tillerText(x.content); }).join("\n") + (what === "replaced" ? "\n→ " + d.inserted.map(function (x) { return tillerText(x.content); }).join("\n→ ") : "") });
        break;
      }
      case "compaction/start":
        compaction = add({ kind: "compaction", depth: turn && turnRow ? 1 : 0, seqs: [e.seq], label: "compaction", text: (d.kind || "") + (d.trigger ? " · " + d.trigger : "") + (d.tokensBefore !== undefined ? " · " + d.tokensBefore + " tokens before" : ""), shadowed: [] });
        compaction.inside = [];
        break;
      case "compaction/summary":
        add({ kind: "compaction", seqs: [e.seq], label: "summary written", text: (d.provider ? "by " + d.provider + ":" + d.model : "") + (d.characters !== undefined ? " · " + d.characters + " characters" : "") + (d.updates !== undefined && d.updates !== null ? " · updates the summary at seq " + d.updates : "") || JSON.stringify(d).slice(0, 2000) });
        break;
      case "compaction/end":
        if (compaction !== null) {
          var marker = compaction;
          compaction = null;
          changed.push(marker.i);
          marker.seqs.push(e.seq);
          bySeq[e.seq] = marker.i;
          var shadow = {};
          (d.pruned || []).forEach(function (s) { shadow[s] = true; });
          for (var q = marker.seqs[0]; q <= e.seq; q++) {
            var inner = eventAt[q];
            if (inner && typeof inner.surfaceOp === "object") (inner.sourceEventSeqs || []).forEach(function (s) { if (!eventAt[s] || eventAt[s].type.indexOf("compaction/") !== 0) shadow[s] = true; });
          }
          marker.shadowed = Object.keys(shadow).map(Number).sort(function (x, y) { return x - y; });
          marker.text += (d.error ? " · failed: " + d.error.message : "") + (d.tokensAfter !== undefined ? " · " + d.tokensAfter + " tokens after" : "") + " · " + marker.shadowed.length + " event" + (marker.shadowed.length === 1 ? "" : "s") + " shadowed";
        } else add({ kind: "compaction", seqs: [e.seq], label: "compaction end", text: JSON.stringify(d) });
        break;
      case "session/end-seed":
        add({ kind: "other", depth: 1, seqs: [e.seq], label: "session", text: header.parent && e.seq === header.seedLength ? "end of the copied seed (fork of " + header.parent.sessionId + ")" : "the session was opened again" });
        break;
      case "approval/request":
        add({ kind: "tool", seqs: [e.seq], label: "approval asked", cls: "k-approval", text: d.tool + " " + JSON.stringify(d.input) + ": " + d.reason + " (" + d.source + ")", note: "call " + d.callId });
        break;
      case "approval/answer":
        add({ kind: "tool", seqs: [e.seq], label: d.decision === "allow" ? "approved" : "refused", cls: d.decision === "allow" ? "k-approval" : "err", text: (d.decision === "allow" ? "approved" : "refused") + " by " + d.by + (d.reason ? ": " + d.reason : "") + (d.rule ? " (always: " + d.rule + ")" : ""), note: "call " + d.callId });
        break;
      case "hook/run":
        add({ kind: "hook", seqs: [e.seq], label: "hook " + (d.event || ""), text: (d.hook || "") + (d.permissionDecision ? " → " + d.permissionDecision : "") + (d.block ? " → block" : "") + (d.stop ? " → stop" : "") + (d.permissionDecisionReason ? ": " + d.permissionDecisionReason : "") + (d.error ? " (error " + d.error.code + ")" : "") });
        break;
      default:
        add({ kind: "other", seqs: [e.seq], label: e.type, text: JSON.stringify(d).slice(0, 4000) });
    }
    prev = e;
  }
  model.sources = Object.keys(sources).sort();
  }
  return model;
}
var TILLER_KINDS = ["turn", "step", "message", "assistant", "reasoning", "tool", "retry", "hook", "inbox", "compaction", "request", "turn-end", "other"];
function tillerStart(doc, data) {
  var model = tillerModel(data), rows = model.rows, PAGE = 250;
  var state = { query: "", kinds: {}, source: "", closed: {}, visible: [], rendered: 0, parts: 0, partsRead: 0, pending: null };
  TILLER_KINDS.forEach(function (k) { state.kinds[k] = k !== "request"; });
  function el(tag, cls, text) { var x = doc.createElement(tag); if (cls) x.className = cls; if (text !== undefined) x.textContent = text; return x; }
  var list = doc.getElementById("rows"), count = doc.getElementById("count");
  while (list.firstChild) list.removeChild(list.firstChild);
  // The header's height, for the rows' scroll-margin-top: kept as the header grows (its controls
  // fill in below, a narrow window wraps them).
  var header = doc.querySelector ? doc.querySelector("header") : null;
  function keepHeaderHeight() { if (header && doc.documentElement && doc.documentElement.style) doc.documentElement.style.setProperty("--tiller-header", (header.offsetHeight + 8) + "px"); }
  if (header && typeof ResizeObserver !== "undefined") new ResizeObserver(keepHeaderHeight).observe(header);
  function blockOf(text, limit) {
    var lines = text.split("\n");
    if (text.length <= limit && lines.length <= 12) return el("pre", "", text);
    var det = el("details"), sum = el("summary", "", lines[0].slice(0, 120) + " … (" + text.length + " characters, " + lines.length + " lines)");
    det.appendChild(sum);
    det.addEventListener("toggle", function () { if (det.open && det.childNodes.length === 1) det.appendChild(el("pre", "", text)); });
    return det;
  }
  function hidden(row) {
    if (!state.kinds[row.kind]) return true;
    if (row.depth > 0 && row.turn && state.closed["t" + row.turn]) return true;
    if (row.depth > 1 && row.step && state.closed["s" + row.turn + "." + row.step]) return true;
    if (state.source) {
      if (row.kind === "message" && row.source !== state.source) return true;
      if (row.kind === "inbox" && row.sources.indexOf(state.source) < 0) return true;
    }
    if (state.query && tillerSearchText(row).indexOf(state.query) < 0) return true;
    return false;
  }
  function renderRow(row) {
    var div = el("div", "row d" + row.depth + " k-" + row.kind + " " + (row.cls || "") + (row.lane === "inbox" ? " inbox" : ""));
    div.id = "seq-" + row.seqs[0];
    div.setAttribute("data-row", String(row.i));
    var a = el("a", "seq", "#" + row.seqs[0]);
    a.href = "#seq-" + row.seqs[0];
    div.appendChild(a);
    var main = el("div", "main"), lane = el("div", "lane");
    var target = row.lane === "inbox" ? lane : main;
    if (row.kind === "turn" || row.kind === "step") {
      var key = row.kind === "turn" ? "t" + row.turn : "s" + row.turn + "." + row.step;
      var head = el("span", "toggle" + (state.closed[key] ? " closed" : ""), row.label);
      head.setAttribute("data-toggle", key);
      main.appendChild(head);
      if (row.stats) main.appendChild(el("span", "stats reason-" + row.reason, row.stats));
    } else {
      target.appendChild(el("span", "badge", row.label));
      if (row.note) target.appendChild(el("span", "note", row.note));
      if (row.text) target.appendChild(blockOf(row.text, 600));
      if (row.result !== undefined) {
        var res = el("div", "result");
        res.appendChild(el("span", "note", row.isError ? "result (error):" : "result:"));
        res.appendChild(blockOf(row.result, 400));
        target.appendChild(res);
      }
      if (row.shadowed && row.shadowed.length) {
        var det = el("details", "shadowed");
        det.appendChild(el("summary", "", "show the " + row.shadowed.length + " shadowed event" + (row.shadowed.length === 1 ? "" : "s")));
        det.addEventListener("toggle", function () {
          if (!det.open || det.childNodes.length > 1) return;
          row.shadowed.forEach(function (s) {
            var line = el("div", "");
            var link = el("a", "seq", "#" + s); link.href = "#seq-" + s;
            line.appendChild(link); line.appendChild(doc.createTextNode(" " + (model.eventAt[s] ? tillerDescribe(model.eventAt[s]).slice(0, 1000) : "(a streamed chunk of an answer)")));
            det.appendChild(line);
          });
        });
        target.appendChild(det);
      }
    }
    div.appendChild(main);
    div.appendChild(lane);
    return div;
  }
  function renderMore(until) {
    var stop = Math.max(state.rendered + PAGE, until === undefined ? 0 : until + 1);
    stop = Math.min(stop, state.visible.length);
    var frag = doc.createDocumentFragment();
    for (var i = state.rendered; i < stop; i++) frag.appendChild(renderRow(rows[state.visible[i]]));
    list.insertBefore(frag, sentinel);
    state.rendered = stop;
  }
  var sentinel = el("div", "empty", "");
  list.appendChild(sentinel);
  function refresh() {
    state.visible = [];
    for (var i = 0; i < rows.length; i++) if (!hidden(rows[i])) state.visible.push(i);
    while (list.firstChild !== sentinel) list.removeChild(list.firstChild);
    state.rendered = 0;
    renderMore();
    showCount();
  }
  function showCount() {
    var reading = state.partsRead < state.parts;
    sentinel.textContent = state.visible.length === 0 ? (reading ? "reading the session…" : "nothing matches") : "";
    count.textContent = state.visible.length + " of " + rows.length + " rows" + (reading ? " · reading the session: part " + (state.partsRead + 1) + " of " + state.parts : "");
  }
  /** The next part of a long session's events (the page reads them after the first rows are shown). */
  function feed(events) {
    var from = rows.length;
    model.feed(events);
    state.partsRead++;
    for (var i = from; i < rows.length; i++) if (!hidden(rows[i])) state.visible.push(i);
    for (var c = 0; c < model.changed.length; c++) {
      var at = model.changed[c], node = at < from ? list.querySelector('[data-row="' + at + '"]') : null;
      if (node) { var fresh = renderRow(rows[at]); if (node.classList.contains("target")) fresh.classList.add("target"); list.insertBefore(fresh, node); list.removeChild(node); }
    }
    addSources();
    if (state.rendered < Math.min(PAGE, state.visible.length)) renderMore();
    showCount();
    if (state.pending !== null && (state.pending <= model.lastSeq || state.partsRead === state.parts)) { var seq = state.pending; state.pending = null; goTo(seq); }
  }
  function goTo(seq) {
    if (seq > model.lastSeq && state.partsRead < state.parts) { state.pending = seq; return true; }
    var index = model.bySeq[seq];
    if (index === undefined) { for (var s = seq; s >= 0 && index === undefined; s--) index = model.bySeq[s]; }
    if (index === undefined) return false;
    var row = rows[index];
    if (hidden(row)) {
      state.query = ""; state.source = ""; state.kinds[row.kind] = true;
      delete state.closed["t" + row.turn]; delete state.closed["s" + row.turn + "." + row.step];
      syncControls();
      refresh();
    }
    var at = state.visible.indexOf(index);
    if (at >= state.rendered) renderMore(at);
    var prevTarget = list.querySelector(".row.target");
    if (prevTarget) prevTarget.classList.remove("target");
    var node = list.querySelector('[data-row="' + index + '"]');
    if (node) { node.classList.add("target"); if (node.scrollIntoView) node.scrollIntoView({ block: "center" }); }
    return true;
  }
  var search = doc.getElementById("search"), sourceSelect = doc.getElementById("source"), kindsBox = doc.getElementById("kinds");
  TILLER_KINDS.forEach(function (k) {
    var label = el("label"), box = el("input");
    box.type = "checkbox"; box.checked = state.kinds[k]; box.setAttribute("data-kind", k);
    box.addEventListener("change", function () { state.kinds[k] = box.checked; refresh(); });
    label.appendChild(box); label.appendChild(doc.createTextNode(" " + k));
    kindsBox.appendChild(label);
  });
  var listed = {};
  function addSources() {
    model.sources.forEach(function (s) { if (listed[s]) return; listed[s] = true; var o = el("option", "", s); o.value = s; sourceSelect.appendChild(o); });
  }
  addSources();
  function syncControls() {
    search.value = state.query; sourceSelect.value = state.source;
    var boxes = kindsBox.querySelectorAll("input");
    for (var i = 0; i < boxes.length; i++) boxes[i].checked = state.kinds[boxes[i].getAttribute("data-kind")];
  }
  var timer = null;
  search.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(function () { state.query = search.value.trim().toLowerCase(); refresh(); }, 150); });
  sourceSelect.addEventListener("change", function () { state.source = sourceSelect.value; refresh(); });
  doc.getElementById("collapse").addEventListener("click", function () { rows.forEach(function (r) { if (r.kind === "turn") state.closed["t" + r.turn] = true; }); refresh(); });
  doc.getElementById("expand").addEventListener("click", function () { state.closed = {}; refresh(); });
  list.addEventListener("click", function (ev) {
    var t = ev.target;
    var key = t && t.getAttribute && t.getAttribute("data-toggle");
    if (!key) return;
    if (state.closed[key]) delete state.closed[key]; else state.closed[key] = true;
    refresh();
  });
  if (typeof IntersectionObserver !== "undefined") {
    new IntersectionObserver(function (entries) { if (entries[0].isIntersecting && state.rendered < state.visible.length) renderMore(); }, { rootMargin: "1500px" }).observe(sentinel);
  }
  function fromHash() { keepHeaderHeight(); var m = /^#seq-(\d+)$/.exec(doc.location ? doc.location.hash : ""); if (m) goTo(Number(m[1])); }
  refresh();
  if (typeof window !== "undefined") window.addEventListener("hashchange", fromHash);
  fromHash();
  return {
    model: model, state: state, refresh: refresh, goTo: goTo, renderMore: renderMore, feed: feed,
    expect: function (parts) { state.parts = parts; showCount(); },
    loaded: function () { return state.partsRead >= state.parts; }
  };
}
/** One later part of a long session's events: gzip in base64, inflated by the browser's DecompressionStream. */
function tillerInflate(node) {
  if (typeof DecompressionStream === "undefined") return Promise.reject(new Error("this browser has no DecompressionStream to read the rest of the session"));
  var text = atob(node.textContent), bytes = new Uint8Array(text.length);
  for (var i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).text().then(JSON.parse);
}
if (typeof document !== "undefined" && document.getElementById("tiller-data")) {
  var tillerFirst = JSON.parse(document.getElementById("tiller-data").textContent);
  window.tiller = tillerStart(document, tillerFirst);
  // A long session's later parts follow this script; they are read one at a time once the
  // document is in, while the first rows are already on screen.
  window.tiller.expect(tillerFirst.parts || 0);
  // When the first rows were on screen, in ms from the start of the navigation (performance.now()).
  window.tiller.shownAt = typeof performance !== "undefined" ? performance.now() : 0;
  var tillerReadParts = function () {
    var parts = document.querySelectorAll("script[data-part]");
    (function next(k) {
      if (k >= parts.length) return;
      tillerInflate(parts[k]).then(function (events) {
        window.tiller.feed(events);
        setTimeout(function () { next(k + 1); }, 0);
      }, function (error) {
        document.getElementById("count").textContent = "cannot read the rest of the session: " + error.message;
      });
    })(0);
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", tillerReadParts); else tillerReadParts();
}
`
