// The tpu_lab dashboard (anywidget front end of tpu_lab.views.dashboard.Dashboard).
// It draws rows computed in Python (tpu_lab/views/_dashboard_rows.py): every label, byte count,
// grouping and colour arrives decided. The synced state is typed below;
// tpu_lab/views/_widget_protocol.py has the same shapes.

/**
 * @typedef {{title: string, subtitle: string, backend: string}} Header
 * @typedef {{name: string, tag: string, driven: boolean, meter: boolean, live: number,
 *   peak: number, usage: string, lines: string[]}} Gauge
 * @typedef {{columns: number, chips: Gauge[]}} Gauges
 * @typedef {{rate: string, fill: number, hit_rate: string, detail: string, compiles: string,
 *   recompiles: string, warn: boolean, note: string}} Counters
 * @typedef {{seq: number, kind: string, label: string, clock: string, summary: string,
 *   times: string, where: string, explanation: string, alert: boolean,
 *   why_open: boolean}} Row
 * @typedef {{kind: string, text: string}} Badge
 * @typedef {{key: string, title: string, total: string, badges: Badge[], timing: string,
 *   open: boolean, rows: Row[]}} Group
 * @typedef {{shown: string, groups: Group[]}} Feed
 * @typedef {{light: string, dark: string}} KindColors
 * @typedef {{value: string, label: string, hint: string}} ModeOption
 * @typedef {{header: Header, gauges: Gauges, counters: Counters, feed: Feed,
 *   palette: Record<string, KindColors>, modes: ModeOption[], eager_mode: string,
 *   error: string, updates: number}} State
 * @typedef {import("@anywidget/types").AnyModel<State>} Model
 */

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

/**
 * Give `node` the colours of an event kind (--tpu-kind follows the theme: dashboard.css).
 * @param {HTMLElement} node
 * @param {string} kind
 * @param {Record<string, KindColors>} palette
 */
function paint(node, kind, palette) {
  const colors = palette[kind];
  if (!colors) return;
  node.style.setProperty("--tpu-kind-light", colors.light);
  node.style.setProperty("--tpu-kind-dark", colors.dark);
}

/** @param {Model} model @param {HTMLElement} root */
function renderHeader(model, root) {
  const header = model.get("header");
  root.replaceChildren();
  if (!header || !header.title) return;
  const title = h("div", "tpu-dash-title");
  title.append(h("span", "tpu-dash-logo", "tpu_lab"), h("span", "", header.title));
  root.append(title, h("div", "tpu-dash-sub", `${header.subtitle} · ${header.backend}`));
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
  const c = model.get("counters");
  root.replaceChildren(h("div", "tpu-dash-label", "Compile cache"));
  if (!c || !c.rate) return;
  const big = h("div", "tpu-dash-big", c.rate);
  big.title = "eager compile-cache hits / lookups since the kernel started (torch.tpu._get_cache_stats())";
  const meter = h("div", "tpu-dash-meter");
  const fill = h("div", "tpu-dash-meter-fill tpu-dash-hit");
  fill.style.width = `${c.fill}%`;
  meter.append(fill);
  const compiled = h("div", "tpu-dash-note");
  compiled.append(document.createTextNode(`torch.compile: ${c.compiles}, `));
  compiled.append(h("span", c.warn ? "tpu-dash-warn" : "", c.recompiles));
  root.append(big, meter, h("div", "tpu-dash-note", c.detail), compiled,
    h("div", "tpu-dash-note", c.note));
}

/** @param {Model} model @param {HTMLElement} root */
function renderChips(model, root) {
  const gauges = model.get("gauges");
  root.replaceChildren(h("div", "tpu-dash-label", "HBM per chip"));
  if (!gauges || !gauges.chips) return;
  const grid = h("div", "tpu-dash-chips");
  grid.style.gridTemplateColumns = `repeat(${gauges.columns}, minmax(150px, 1fr))`;
  for (const chip of gauges.chips) {
    const tile = h("div", chip.driven ? "tpu-dash-chip" : "tpu-dash-chip tpu-dash-other");
    const head = h("div", "tpu-dash-chip-head");
    head.append(h("b", "", chip.name), h("span", "tpu-dash-tag", chip.tag));
    const meter = h("div", "tpu-dash-meter");
    const fill = h("div", "tpu-dash-meter-fill");
    fill.style.width = `${chip.live > 0 ? Math.max(chip.live, 0.5) : 0}%`; // a sliver shows
    meter.append(fill);
    if (chip.meter) {
      const mark = h("div", "tpu-dash-peak");
      mark.style.left = `${chip.peak}%`;
      meter.append(mark);
    }
    tile.append(head, meter);
    for (const line of chip.lines) tile.append(h("div", "tpu-dash-note", line));
    grid.append(tile);
  }
  root.append(grid);
}

/**
 * @param {Model} model
 * @param {HTMLElement} root
 * @param {{closed: Map<string, boolean>, why: Map<number, boolean>}} ui open/closed state kept
 *   across updates
 */
function renderFeed(model, root, ui) {
  const feed = model.get("feed");
  const palette = model.get("palette");
  const scroller = root.querySelector(".tpu-dash-feed");
  const scrollTop = scroller ? scroller.scrollTop : 0;
  root.replaceChildren();
  const label = h("div", "tpu-dash-label", "Events by cell");
  if (feed && feed.shown) label.append(h("span", "tpu-dash-count", feed.shown));
  root.append(label);
  const list = h("div", "tpu-dash-feed");
  const groups = feed && feed.groups ? feed.groups : [];
  if (!groups.length) {
    list.append(h("div", "tpu-dash-empty", "No events yet: run a cell that uses the device."));
  }
  for (const group of groups) {
    const details = /** @type {HTMLDetailsElement} */ (h("details", "tpu-dash-group"));
    details.open = ui.closed.has(group.key) ? !ui.closed.get(group.key) : group.open;
    details.addEventListener("toggle", () => ui.closed.set(group.key, !details.open));
    const summary = h("summary", "tpu-dash-group-head");
    summary.append(h("b", "", group.title));
    for (const badge of group.badges) {
      const node = h("span", `tpu-dash-badge tpu-kind-${badge.kind}`, badge.text);
      paint(node, badge.kind, palette);
      summary.append(node);
    }
    if (group.timing) summary.append(h("span", "tpu-dash-timing", group.timing));
    details.append(summary);
    for (const item of group.rows) {
      const row = h("div", `tpu-dash-event tpu-kind-${item.kind}`);
      if (item.alert) row.classList.add("tpu-dash-alert");
      paint(row, item.kind, palette);
      row.dataset.seq = String(item.seq);
      row.append(h("span", "tpu-dash-time", item.clock), h("span", "tpu-dash-kind", item.label));
      const what = h("span", "tpu-dash-what", item.summary);
      if (item.times) what.append(h("span", "tpu-dash-times", item.times));
      row.append(what, h("span", "tpu-dash-where", item.where));
      details.append(row);
      if (item.explanation) {
        const why = /** @type {HTMLDetailsElement} */ (h("details", "tpu-dash-why"));
        why.open = ui.why.has(item.seq) ? ui.why.get(item.seq) : item.why_open;
        why.addEventListener("toggle", () => ui.why.set(item.seq, why.open));
        why.append(h("summary", "", "why, and how to avoid it"));
        const body = h("div", "tpu-dash-explanation");
        body.innerHTML = item.explanation; // built by ExplanationView.to_html: escaped text
        why.append(body);
        details.append(why);
      }
    }
    list.append(details);
  }
  root.append(list);
  list.scrollTop = scrollTop;
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
    ["change:header", () => renderHeader(model, header)],
    ["change:eager_mode change:error change:modes", () => renderMode(model, mode)],
    ["change:counters", () => renderCache(model, cache)],
    ["change:gauges", () => renderChips(model, chips)],
    ["change:feed change:palette", () => renderFeed(model, feed, ui)],
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
