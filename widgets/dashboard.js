// The tpu_lab dashboard (anywidget front end of tpu_lab.views.dashboard.Dashboard).
// The synced state is typed below; tpu_lab/views/_widget_protocol.py has the same shapes.

/**
 * @typedef {{backend: string, simulated: boolean, device_name: string, topology: string,
 *   topology_shape: number[], chips: number, devices_in_process: number}} DeviceState
 * @typedef {{index: number, driven: boolean, capacity: number, live: number, peak: number,
 *   measured: boolean}} ChipState
 * @typedef {{requests: number, hits: number, misses: number, compiles: number,
 *   recompiles: number}} CacheState
 * @typedef {{seq: number, kind: string, summary: string, cell: number | null, where: string,
 *   time: number, explanation: string}} EventState
 * @typedef {{cell: number | null, total: number, counts: Record<string, number>}} CellState
 * @typedef {{value: string, label: string, hint: string}} ModeOption
 * @typedef {{device: DeviceState, chips: ChipState[], cache: CacheState, events: EventState[],
 *   cells: CellState[], seen: number, modes: ModeOption[], eager_mode: string, error: string,
 *   updates: number}} State
 * @typedef {import("@anywidget/types").AnyModel<State>} Model
 */

const KIND_LABELS = {
  compile: "compile",
  recompile: "recompile",
  cache_hit: "cache hit",
  cache_miss: "cache miss",
  sync: "sync",
  transfer: "transfer",
  oom: "OOM",
  mode_change: "mode",
};
const PLURALS = {
  compile: "compiles",
  recompile: "recompiles",
  cache_hit: "cache hits",
  cache_miss: "cache misses",
  sync: "syncs",
  transfer: "transfers",
  oom: "OOMs",
  mode_change: "mode changes",
};
const ROUTINE = new Set(["sync", "transfer", "cache_hit"]);

/** @param {number} n bytes @returns {string} like tpu_lab.runtime.memory.format_bytes */
function formatBytes(n) {
  let value = n;
  for (const unit of ["B", "KiB", "MiB", "GiB", "TiB"]) {
    if (Math.abs(value) < 1024 || unit === "TiB") {
      return unit === "B" ? `${Math.trunc(value)} B` : `${value.toFixed(2)} ${unit}`;
    }
    value /= 1024;
  }
  return `${n} B`;
}

/**
 * @param {string} tag
 * @param {string} [className]
 * @param {string} [text]
 * @returns {HTMLElement}
 */
function h(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** @param {number} seconds @returns {string} HH:MM:SS */
function clock(seconds) {
  return new Date(seconds * 1000).toTimeString().slice(0, 8);
}

/** @param {number | null} cell */
function cellName(cell) {
  return cell === null ? "outside a cell" : `In [${cell}]`;
}

/** @param {Model} model @param {HTMLElement} root */
function renderHeader(model, root) {
  const d = model.get("device");
  root.replaceChildren();
  if (!d || !d.topology) return;
  const title = h("div", "tpu-dash-title");
  title.append(h("span", "tpu-dash-logo", "tpu_lab"), h("span", "", d.device_name));
  const shape = d.topology_shape.join("×");
  const chips = d.chips === 1 ? "1 chip" : `${d.chips} chips`;
  const sub = h(
    "div",
    "tpu-dash-sub",
    `${d.topology} · topology ${shape} · ${chips} · this process drives ` +
      `${d.devices_in_process} · ${d.backend}`,
  );
  root.append(title, sub);
}

/** @param {Model} model @param {HTMLElement} root */
function renderMode(model, root) {
  const current = model.get("eager_mode");
  const options = model.get("modes");
  root.replaceChildren(h("div", "tpu-dash-label", "Execution"));
  const group = h("div", "tpu-dash-toggle");
  group.setAttribute("role", "radiogroup");
  group.setAttribute("aria-label", "torch.tpu.eager_mode");
  let hint = "";
  for (const option of options) {
    const button = /** @type {HTMLButtonElement} */ (h("button", "tpu-dash-seg", option.label));
    button.type = "button";
    button.title = option.hint;
    button.dataset.mode = option.value;
    const active = option.value === current;
    button.setAttribute("role", "radio");
    button.setAttribute("aria-checked", String(active));
    if (active) {
      button.classList.add("tpu-dash-active");
      hint = option.hint;
    }
    button.addEventListener("click", () => {
      if (model.get("eager_mode") === option.value) return;
      model.set("eager_mode", option.value);
      model.save_changes();
    });
    group.append(button);
  }
  root.append(group);
  const mode = h("div", "tpu-dash-note");
  mode.append(h("code", "tpu-dash-mode", `torch.tpu.eager_mode = ${current}`));
  if (hint) mode.append(h("div", "", hint));
  root.append(mode);
  const error = model.get("error");
  if (error) root.append(h("div", "tpu-dash-error", error));
}

/** @param {Model} model @param {HTMLElement} root */
function renderCache(model, root) {
  const c = model.get("cache");
  root.replaceChildren(h("div", "tpu-dash-label", "Compile cache"));
  if (!c) return;
  const rate = c.requests ? c.hits / c.requests : null;
  const big = h("div", "tpu-dash-big", rate === null ? "—" : `${Math.round(rate * 100)}%`);
  big.title = "DEFER_AND_FUSE compile-cache hits / requests (torch.tpu._get_cache_stats())";
  const meter = h("div", "tpu-dash-meter");
  const fill = h("div", "tpu-dash-meter-fill tpu-dash-hit");
  fill.style.width = `${rate === null ? 0 : rate * 100}%`;
  meter.append(fill);
  const detail = h(
    "div",
    "tpu-dash-note",
    c.requests
      ? `hit rate · ${c.hits} hits, ${c.misses} misses of ${c.requests} graphs`
      : "hit rate · no DEFER_AND_FUSE graphs yet",
  );
  const compiled = h("div", "tpu-dash-note");
  compiled.append(
    document.createTextNode(`torch.compile: ${c.compiles} compile${c.compiles === 1 ? "" : "s"}, `),
  );
  const recompiles = h(
    "span",
    c.recompiles ? "tpu-dash-warn" : "",
    `${c.recompiles} recompile${c.recompiles === 1 ? "" : "s"}`,
  );
  compiled.append(recompiles);
  root.append(big, meter, detail, compiled);
}

/** @param {Model} model @param {HTMLElement} root */
function renderChips(model, root) {
  const chips = model.get("chips");
  const d = model.get("device");
  root.replaceChildren(h("div", "tpu-dash-label", "HBM per chip"));
  const grid = h("div", "tpu-dash-chips");
  // lay the chips out like the topology's first two axes (e.g. 2×2 for v6e-4)
  const cols = d && d.topology_shape.length ? Math.max(1, d.topology_shape[0]) : 1;
  const columns = Math.min(cols === 1 ? chips.length : cols, 4);
  grid.style.gridTemplateColumns = `repeat(${columns}, minmax(150px, 1fr))`;
  for (const chip of chips) {
    const tile = h("div", chip.driven ? "tpu-dash-chip" : "tpu-dash-chip tpu-dash-other");
    const head = h("div", "tpu-dash-chip-head");
    head.append(h("b", "", `chip ${chip.index}`));
    head.append(h("span", "tpu-dash-tag", chip.driven ? "this process" : "other process"));
    const meter = h("div", "tpu-dash-meter");
    const used = chip.driven && chip.measured && chip.capacity;
    const live = used ? (100 * chip.live) / chip.capacity : 0;
    const peak = used ? (100 * chip.peak) / chip.capacity : 0;
    const fill = h("div", "tpu-dash-meter-fill");
    fill.style.width = `${Math.max(live, live > 0 ? 0.5 : 0)}%`;
    const mark = h("div", "tpu-dash-peak");
    mark.style.left = `${peak}%`;
    mark.title = `peak ${formatBytes(chip.peak)}`;
    meter.append(fill);
    if (used) meter.append(mark);
    let text;
    if (!chip.driven) text = `${formatBytes(chip.capacity)} · driven by another process`;
    else if (!chip.measured) text = `${formatBytes(chip.capacity)} · usage not reported`;
    else text = `${formatBytes(chip.live)} of ${formatBytes(chip.capacity)}`;
    const note = h("div", "tpu-dash-note", text);
    tile.append(head, meter, note);
    if (used) tile.append(h("div", "tpu-dash-note", `peak ${formatBytes(chip.peak)}`));
    grid.append(tile);
  }
  root.append(grid);
}

/**
 * Routine events (syncs, transfers, cache hits) with the same summary and place collapse into
 * one row per cell, at their first occurrence, with a count (×N); others keep a row each.
 * @param {EventState[]} events
 * @returns {{event: EventState, count: number}[]}
 */
function rows(events) {
  /** @type {{event: EventState, count: number}[]} */
  const out = [];
  /** @type {Map<string, {event: EventState, count: number}>} */
  const seen = new Map();
  for (const event of events) {
    if (!ROUTINE.has(event.kind)) {
      out.push({ event, count: 1 });
      continue;
    }
    const key = `${event.kind}\u0000${event.summary}\u0000${event.where}`;
    const row = seen.get(key);
    if (row) {
      row.count += 1;
    } else {
      const first = { event, count: 1 };
      seen.set(key, first);
      out.push(first);
    }
  }
  return out;
}

/**
 * @param {Model} model
 * @param {HTMLElement} root
 * @param {{closed: Map<string, boolean>, why: Map<number, boolean>}} ui open/closed state kept
 *   across updates
 */
function renderFeed(model, root, ui) {
  const events = model.get("events");
  const cells = new Map(model.get("cells").map((c) => [String(c.cell), c]));
  const scroller = root.querySelector(".tpu-dash-feed");
  const scrollTop = scroller ? scroller.scrollTop : 0;
  root.replaceChildren();
  const label = h("div", "tpu-dash-label", "Events by cell");
  label.append(
    h("span", "tpu-dash-count", `${events.length} shown of ${model.get("seen").toLocaleString()}`),
  );
  root.append(label);
  const feed = h("div", "tpu-dash-feed");
  if (!events.length) {
    feed.append(h("div", "tpu-dash-empty", "No events yet: run a cell that uses the device."));
  }
  /** @type {Map<string, EventState[]>} */
  const groups = new Map();
  for (const event of events) {
    const key = String(event.cell);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(event);
  }
  const ordered = [...groups.entries()].sort(
    (a, b) => b[1][b[1].length - 1].seq - a[1][a[1].length - 1].seq,
  );
  // the newest torch.compile recompilation starts with its explanation open
  const newestRecompile = [...events].reverse().find((e) => e.kind === "recompile");
  ordered.forEach(([key, list], position) => {
    const group = /** @type {HTMLDetailsElement} */ (h("details", "tpu-dash-group"));
    group.open = ui.closed.has(key) ? !ui.closed.get(key) : position < 3;
    group.addEventListener("toggle", () => ui.closed.set(key, !group.open));
    const summary = h("summary", "tpu-dash-group-head");
    summary.append(h("b", "", cellName(list[0].cell)));
    const info = cells.get(key);
    const counts = info ? info.counts : {};
    for (const [kind, n] of Object.entries(counts)) {
      const name = n === 1 ? KIND_LABELS[kind] : PLURALS[kind];
      const badge = h("span", `tpu-dash-badge tpu-kind-${kind}`, `${n} ${name || kind}`);
      summary.append(badge);
    }
    group.append(summary);
    for (const { event, count } of rows(list)) {
      const row = h("div", `tpu-dash-event tpu-kind-${event.kind}`);
      row.dataset.seq = String(event.seq);
      row.append(h("span", "tpu-dash-time", clock(event.time)));
      row.append(h("span", "tpu-dash-kind", KIND_LABELS[event.kind] || event.kind));
      const what = h("span", "tpu-dash-what", event.summary);
      if (count > 1) what.append(h("span", "tpu-dash-times", `×${count}`));
      row.append(what, h("span", "tpu-dash-where", event.where));
      group.append(row);
      if (event.explanation) {
        const why = /** @type {HTMLDetailsElement} */ (h("details", "tpu-dash-why"));
        why.open = ui.why.has(event.seq)
          ? ui.why.get(event.seq)
          : newestRecompile !== undefined && newestRecompile.seq === event.seq;
        why.addEventListener("toggle", () => ui.why.set(event.seq, why.open));
        why.append(h("summary", "", "why, and how to avoid it"));
        const body = h("div", "tpu-dash-explanation");
        body.innerHTML = event.explanation; // built by ExplanationView.to_html: escaped text
        why.append(body);
        group.append(why);
      }
    }
    feed.append(group);
  });
  root.append(feed);
  feed.scrollTop = scrollTop;
}

/** @param {Model} model @param {HTMLElement} root */
function renderFooter(model, root) {
  const time = new Date().toTimeString().slice(0, 8);
  root.replaceChildren(h("span", "tpu-dash-dot tpu-dash-pulse"));
  root.append(h("span", "", `live · update ${model.get("updates")} at ${time}`));
}

/** @type {import("@anywidget/types").Render<State>} */
function render({ model, el }) {
  const root = h("div", "tpu-dash");
  const header = h("div", "tpu-dash-header");
  const top = h("div", "tpu-dash-row");
  const mode = h("div", "tpu-dash-card tpu-dash-modecard");
  const cache = h("div", "tpu-dash-card tpu-dash-cachecard");
  top.append(mode, cache);
  const chips = h("div", "tpu-dash-card");
  const feed = h("div", "tpu-dash-card tpu-dash-feedcard");
  const footer = h("div", "tpu-dash-footer");
  root.append(header, top, chips, feed, footer);
  el.append(root);
  const ui = { closed: new Map(), why: new Map() };

  /** @type {[string, () => void][]} */
  const parts = [
    ["change:device", () => renderHeader(model, header)],
    ["change:eager_mode change:error change:modes", () => renderMode(model, mode)],
    ["change:cache", () => renderCache(model, cache)],
    ["change:chips change:device", () => renderChips(model, chips)],
    ["change:events change:cells change:seen", () => renderFeed(model, feed, ui)],
    ["change:updates", () => renderFooter(model, footer)],
  ];
  // one update message changes several traits: draw each part once, after all of them
  /** @type {Set<() => void>} */
  const due = new Set();
  const schedule = (/** @type {() => void} */ draw) => () => {
    if (due.size === 0) {
      queueMicrotask(() => {
        const draws = [...due];
        due.clear();
        for (const d of draws) d();
      });
    }
    due.add(draw);
  };
  /** @type {[string, () => void][]} */
  const handlers = parts.map(([events, draw]) => [events, schedule(draw)]);
  for (const [events, handler] of handlers) model.on(events, handler);
  for (const [, draw] of parts) draw();
  return () => {
    for (const [events, handler] of handlers) model.off(events, handler);
  };
}

export default { render };
