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
  let running = 0;
  const label = h('span', { class: 'pager-label', 'aria-live': 'polite' }, 'Page 1');
  const previous = h('button', { type: 'button', class: 'button', disabled: true }, 'Previous page');
  const next = h('button', { type: 'button', class: 'button', disabled: true }, 'Next page');

  function update() {
    label.textContent = `Page ${earlier.length + 1}`;
    previous.disabled = running > 0 || earlier.length === 0;
    next.disabled = running > 0 || !nextAfter;
  }

  /**
   * Loads the page after `after`; only once it has loaded does moved() move the page number
   * and the cursors, so that a failed load leaves them matching the page still shown.
   */
  async function go(after, moved = () => {}) {
    running += 1;
    update();
    try {
      const page = await load(after);
      if (page) {
        moved();
        nextAfter = page.has_more ? page.next_after : null;
      }
      return page;
    } finally {
      running -= 1;
      update();
    }
  }

  next.addEventListener('click', async () => {
    if (!nextAfter) return;
    const target = nextAfter;
    await go(target, () => {
      earlier.push(current);
      current = target;
    }).catch(() => {});
  });
  previous.addEventListener('click', async () => {
    if (earlier.length === 0) return;
    const target = earlier[earlier.length - 1];
    await go(target, () => {
      earlier.pop();
      current = target;
    }).catch(() => {});
  });

  return {
    element: h('div', { class: 'pager' }, previous, label, next),
    /** Back to the first page (after a filter change). */
    reset() {
      return go(null, () => {
        earlier.length = 0;
        current = null;
      });
    },
    /** The current page again. */
    reload() {
      return go(current);
    },
  };
}
