// DOM building without innerHTML: queue names and error texts come from
// outside and are only ever set as text.

// el builds an element. attrs: plain attributes, plus "class", "text" and
// "on<event>" handlers; children: nodes, strings or null (skipped).
export function el(tag, attrs = {}, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'text') n.textContent = String(v);
    else if (k.startsWith('on') && typeof v === 'function') n.addEventListener(k.slice(2), v);
    else n.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of nodes(children)) {
    n.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return n;
}

// nodes flattens its arguments and drops null, undefined and false, for
// replaceChildren and append, which take neither arrays nor nulls.
export function nodes(...xs) {
  return xs.flat(Infinity).filter(x => x !== null && x !== undefined && x !== false);
}

// stat is one labelled figure of a stats grid. label names the figure and
// its boundary; field is the data-field the tests and scripts read.
export function stat(label, value, { field, hint, cls } = {}) {
  return el('div', {},
    el('dt', {}, label, hint ? el('small', {}, ' ', hint) : null),
    el('dd', { 'data-field': field, class: cls }, value));
}

// table builds a table whose cells carry their column label, so the
// "stack" style can show each row as a labelled block on a phone.
// columns: [{label, cell(row) -> string|Node, cls?(row) -> string}]
export function table(columns, rows, { stack = true, rowAttrs } = {}) {
  const head = el('thead', {}, el('tr', {}, columns.map(c => el('th', { scope: 'col' }, c.label))));
  const body = el('tbody', {}, rows.map(r => el('tr', rowAttrs ? rowAttrs(r) : {},
    columns.map(c => el('td', { 'data-label': c.label, 'data-field': c.field, class: c.cls ? c.cls(r) : null }, c.cell(r))))));
  return el('div', { class: 'table-wrap' }, el('table', { class: stack ? 'stack' : null }, head, body));
}

// kv is a two-column table of [label, value] pairs.
export function kv(pairs) {
  return el('table', { class: 'kv' }, el('tbody', {},
    pairs.map(([k, v]) => el('tr', {}, el('th', { scope: 'row' }, k), el('td', {}, v)))));
}
