// Element helpers. Text only ever goes in through textContent or text nodes, never as markup.

const SVG_NS = 'http://www.w3.org/2000/svg';

function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function applyProps(node, props) {
  for (const [key, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') node.setAttribute('class', value);
    else if (key === 'text') node.textContent = value;
    else if (key === 'style' || key === 'innerHTML') {
      throw new Error(`refusing to set ${key}`);
    } else if (/^on/i.test(key)) {
      // Events are bound one way only, with addEventListener on the node once it is made.
      throw new Error(`refusing to set ${key}: bind events with addEventListener`);
    } else if (key in node && typeof value !== 'string') {
      node[key] = value;
    } else node.setAttribute(key, value === true ? '' : String(value));
  }
}

/** Makes an HTML element: h('a', {href: '#/x', class: 'link'}, 'text', childNode). */
export function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  applyProps(node, props);
  append(node, children);
  return node;
}

/** Makes an SVG element with presentation attributes. */
export function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  append(node, children);
  return node;
}

/** Replaces every child of a node. */
export function fill(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

let idCounter = 0;
/** A document-unique id for label/aria wiring. */
export function uid(prefix = 'id') {
  idCounter += 1;
  return `${prefix}-${idCounter}`;
}

/** A link to one of the console's own hash routes. */
export function routeLink(route, text, props = {}) {
  return h('a', { ...props, href: `#${route}` }, text);
}

/** An element with role="alert" that stays hidden until it has something to say. */
export function alertBox() {
  return h('div', { class: 'alert', role: 'alert', hidden: true });
}

/** Shows an error in an alert box: the problem's detail and each field error. */
export function showError(box, error) {
  const fields = error && Array.isArray(error.fieldErrors) ? error.fieldErrors : [];
  fill(box,
    h('p', { class: 'alert-detail' }, error && error.message ? error.message : String(error)),
    fields.length ? h('ul', { class: 'alert-fields' }, fields.map((f) => h('li', {}, `${f.field}: ${f.message}`))) : null);
  box.hidden = false;
}

/** Shows plain messages (client-side validation) in an alert box. */
export function showMessages(box, messages) {
  fill(box, messages.length === 1 ? h('p', { class: 'alert-detail' }, messages[0])
    : h('ul', { class: 'alert-fields' }, messages.map((m) => h('li', {}, m))));
  box.hidden = false;
}

export function hideAlert(box) {
  box.hidden = true;
  box.replaceChildren();
}

/** A labelled form field; returns {field, input}. */
export function field(label, input, hint) {
  const id = input.id || uid('f');
  input.id = id;
  let hintNode = null;
  if (hint) {
    hintNode = h('p', { class: 'hint', id: `${id}-hint` }, hint);
    input.setAttribute('aria-describedby', hintNode.id);
  }
  const wrapper = h('div', { class: 'field' }, h('label', { for: id }, label), input, hintNode);
  return { field: wrapper, input };
}

/** A table inside a horizontally scrolling wrapper, with caption and column headers. */
export function table({ caption, columns, rows, empty, captionHidden = false }) {
  const body = h('tbody');
  if (rows.length === 0) {
    body.append(h('tr', {}, h('td', { class: 'empty', colSpan: columns.length }, empty || 'Nothing to show.')));
  } else {
    for (const row of rows) body.append(row instanceof Node ? row : h('tr', {}, row.map((cell) => h('td', {}, cell))));
  }
  const tableNode = h('table', {},
    h('caption', { class: captionHidden ? 'visually-hidden' : '' }, caption),
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col' }, c)))),
    body);
  return h('div', { class: 'table-wrap', tabindex: '0' }, tableNode);
}

/** A <time> element showing a formatted instant. */
export function timeNode(iso, text) {
  if (!iso) return h('span', { class: 'muted' }, '—');
  return h('time', { datetime: iso, title: iso }, text);
}

/** A coloured state label. */
export function badge(state) {
  return h('span', { class: `badge badge-${String(state).replace(/[^a-z_]/g, '')}` }, state);
}

/** A monospace span for ids and amounts. */
export function mono(text) {
  return h('span', { class: 'mono' }, text);
}
