// Cursor paging: "Previous page" / "Page N" / "Next page" over an API list.

import { h } from './dom.js';

/**
 * Creates a pager. load(after) fetches one page ({data, has_more, next_after}) and renders it.
 * Returns {element, reset(), reload()}.
 */
export function createPager(load) {
  const earlier = [];
  let current = null;
  let nextAfter = null;
  let busy = false;
  const label = h('span', { class: 'pager-label', 'aria-live': 'polite' }, 'Page 1');
  const previous = h('button', { type: 'button', class: 'button', disabled: true }, 'Previous page');
  const next = h('button', { type: 'button', class: 'button', disabled: true }, 'Next page');

  function update() {
    label.textContent = `Page ${earlier.length + 1}`;
    previous.disabled = busy || earlier.length === 0;
    next.disabled = busy || !nextAfter;
  }

  async function go(after) {
    busy = true;
    update();
    try {
      const page = await load(after);
      if (page) nextAfter = page.has_more ? page.next_after : null;
      return page;
    } finally {
      busy = false;
      update();
    }
  }

  next.addEventListener('click', async () => {
    if (!nextAfter) return;
    earlier.push(current);
    current = nextAfter;
    await go(current).catch(() => {});
  });
  previous.addEventListener('click', async () => {
    if (earlier.length === 0) return;
    current = earlier.pop();
    await go(current).catch(() => {});
  });

  return {
    element: h('div', { class: 'pager' }, previous, label, next),
    /** Back to the first page (after a filter change). */
    reset() {
      earlier.length = 0;
      current = null;
      nextAfter = null;
      return go(null);
    },
    /** The current page again. */
    reload() {
      return go(current);
    },
  };
}
