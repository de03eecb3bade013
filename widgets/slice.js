// The tpu_lab slice widget (anywidget front end of tpu_lab.views.slice_widget.SliceWidget).
// It draws rows computed in Python (tpu_lab/views/_slice_rows.py): every label, choice, byte
// count, colour and sentence arrives decided. A control sets the trait it names; Python weighs
// the step again, or refuses the change (`error`) and sets the trait back. The synced state is
// typed below; tpu_lab/views/_widget_protocol.py has the same shapes.

/**
 * @typedef {{title: string, subtitle: string}} SliceHeader
 * @typedef {{value: string, label: string}} ControlOption
 * @typedef {{name: string, label: string, kind: string, numeric: boolean, value: string,
 *   options: ControlOption[], step: number, hint: string, disabled: boolean}} Control
 * @typedef {{kind: string, size: string, width: number, color: string}} HbmSegment
 * @typedef {{title: string, usage: string, over: boolean, capacity: number,
 *   segments: HbmSegment[], verdict: string, fix: string}} Hbm
 * @typedef {{key: string, label: string, value: string, note: string}} Figure
 * @typedef {{title: string, figures: Figure[], lines: string[], priced: boolean}} SliceResult
 * @typedef {{header: SliceHeader, controls: Control[], hbm: Hbm, result: SliceResult,
 *   busy: string, error: string, updates: number}} State
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
 * Set the trait a control names; a whole-number control sends a number where the field holds
 * one (Python refuses anything else, saying why).
 * @param {Model} model
 * @param {Control} control
 * @param {string} raw
 */
function send(model, control, raw) {
  const number = Number(raw);
  const value = control.numeric && raw.trim() !== "" && Number.isFinite(number) ? number : raw;
  model.set(/** @type {any} */ (control.name), value);
  model.save_changes();
}

/** @param {Model} model @param {HTMLElement} root */
function renderHeader(model, root) {
  const header = model.get("header");
  root.replaceChildren();
  if (!header || !header.title) return;
  const title = h("div", "tpu-slice-title");
  title.append(h("span", "tpu-slice-logo", "tpu_lab"), h("span", "", header.title));
  root.append(title, h("div", "tpu-slice-sub", header.subtitle));
}

/** @param {Model} model @param {HTMLElement} root */
function renderControls(model, root) {
  root.replaceChildren();
  for (const control of model.get("controls") || []) {
    const field = h("label", "tpu-slice-control");
    field.title = control.hint;
    field.append(h("span", "tpu-slice-control-label", control.label));
    /** @type {HTMLSelectElement | HTMLInputElement} */
    let input;
    if (control.kind === "select") {
      input = /** @type {HTMLSelectElement} */ (h("select"));
      for (const option of control.options) {
        const item = /** @type {HTMLOptionElement} */ (h("option", "", option.label));
        item.value = option.value;
        input.append(item);
      }
    } else {
      input = /** @type {HTMLInputElement} */ (h("input"));
      input.type = "number";
      input.min = String(control.step);
      input.step = String(control.step);
    }
    input.value = control.value;
    input.disabled = control.disabled;
    input.dataset.control = control.name;
    input.addEventListener("change", () => send(model, control, input.value));
    field.append(input);
    root.append(field);
  }
}

/** @param {Model} model @param {HTMLElement} root */
function renderError(model, root) {
  const error = model.get("error");
  root.replaceChildren();
  root.hidden = !error;
  if (error) root.append(h("b", "", "Not changed: "), document.createTextNode(error));
}

/** @param {Model} model @param {HTMLElement} root */
function renderResult(model, root) {
  const result = model.get("result");
  root.replaceChildren(h("div", "tpu-slice-label", "Estimated step"));
  if (!result || !result.figures) return;
  root.append(h("div", "tpu-slice-choice", result.title));
  const grid = h("div", "tpu-slice-figures");
  for (const figure of result.figures) {
    const cell = h("div", `tpu-slice-figure tpu-slice-${figure.key}`);
    cell.dataset.figure = figure.key;
    cell.append(
      h("div", "tpu-slice-figure-label", figure.label),
      h("div", "tpu-slice-figure-value", figure.value),
      h("div", "tpu-slice-note", figure.note),
    );
    grid.append(cell);
  }
  root.append(grid);
}

/** @param {Model} model @param {HTMLElement} root */
function renderHbm(model, root) {
  const hbm = model.get("hbm");
  root.replaceChildren();
  if (!hbm || !hbm.segments) return;
  root.classList.toggle("tpu-slice-over", hbm.over);
  const label = h("div", "tpu-slice-label", hbm.title);
  root.append(label);
  const usage = h("div", "tpu-slice-usage", hbm.usage);
  if (hbm.over) usage.append(h("span", "tpu-slice-overtag", "OVER"));
  root.append(usage);
  const bar = h("div", "tpu-slice-bar");
  for (const segment of hbm.segments) {
    const part = h("div", "tpu-slice-segment");
    part.style.width = `${segment.width}%`;
    part.style.background = segment.color;
    part.title = `${segment.kind}: ${segment.size}`;
    bar.append(part);
  }
  if (hbm.over) {
    const mark = h("div", "tpu-slice-capacity");
    mark.style.left = `${hbm.capacity}%`;
    mark.title = "the chip's HBM ends here";
    bar.append(mark);
  }
  root.append(bar);
  const legend = h("div", "tpu-slice-legend");
  for (const segment of hbm.segments) {
    const item = h("span", "tpu-slice-key");
    const swatch = h("span", "tpu-slice-swatch");
    swatch.style.background = segment.color;
    item.append(swatch, document.createTextNode(`${segment.kind} ${segment.size}`));
    legend.append(item);
  }
  root.append(legend, h("div", "tpu-slice-verdict", hbm.verdict));
  if (hbm.fix) root.append(h("div", "tpu-slice-fix", hbm.fix));
}

/** @param {Model} model @param {HTMLElement} root */
function renderLines(model, root) {
  const result = model.get("result");
  root.replaceChildren();
  const list = h("ul");
  for (const line of (result && result.lines) || []) list.append(h("li", "", line));
  root.append(list);
}

/** @param {Model} model @param {HTMLElement} root @param {HTMLElement} footer */
function renderBusy(model, root, footer) {
  const busy = model.get("busy");
  root.classList.toggle("tpu-slice-busy", Boolean(busy));
  footer.replaceChildren(h("span", busy ? "tpu-slice-dot tpu-slice-spin" : "tpu-slice-dot"));
  footer.append(h("span", "", busy || `live · update ${model.get("updates")}`));
}

/** @type {import("@anywidget/types").Render<State>} */
function render({ model, el }) {
  const root = h("div", "tpu-slice");
  const header = h("div", "tpu-slice-header");
  const controls = h("div", "tpu-slice-controls");
  const error = h("div", "tpu-slice-error");
  const main = h("div", "tpu-slice-row");
  const result = h("div", "tpu-slice-card tpu-slice-result");
  const hbm = h("div", "tpu-slice-card tpu-slice-hbm");
  main.append(result, hbm);
  const lines = h("div", "tpu-slice-lines");
  const footer = h("div", "tpu-slice-footer");
  root.append(header, controls, error, main, lines, footer);
  el.append(root);

  const draw = () => {
    renderHeader(model, header);
    renderControls(model, controls);
    renderError(model, error);
    renderResult(model, result);
    renderHbm(model, hbm);
    renderLines(model, lines);
    renderBusy(model, root, footer);
  };
  // Python bumps `updates` once per change it settles (accepted or refused): one draw each;
  // `busy` flips while it weighs
  const onUpdate = () => draw();
  const onBusy = () => renderBusy(model, root, footer);
  model.on("change:updates", onUpdate);
  model.on("change:busy", onBusy);
  draw();
  return () => {
    model.off("change:updates", onUpdate);
    model.off("change:busy", onBusy);
  };
}

export default { render };
