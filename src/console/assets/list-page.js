// A list read from the API a page at a time, written once for every page that lists: the
// answer to a request a newer one replaced is dropped, nothing is drawn once the page is left,
// a failure shows in the list's own alert box, and the pager (or "More …") moves only over
// pages that loaded. The list sits in a flush card: its toolbar, its alert, its rows, its foot.

import { h, alertBox, showError, hideAlert } from './dom.js';
import { createPager } from './pager.js';

/** The card every list sits in: filters (or null), the alert, the rows and the foot's control. */
function listCard(toolbar, alert, content, control) {
  return h('div', { class: 'card card-flush' }, toolbar, alert, content, h('div', { class: 'card-foot' }, control));
}

/**
 * The loader under every list. fetchPage(after) resolves to an API page ({data, has_more,
 * next_after}); render(page, after) draws it. load(after) resolves to the page drawn, or to
 * null when a newer request replaced this one, the page was left, or the request failed (its
 * error is then shown, and onFailure(after) may draw something and give the page it stands
 * for). busy, when given, carries aria-busy while the newest request is under way.
 */
function listLoader({ signal, fetchPage, render, busy = null, onFailure = () => null }) {
  const alert = alertBox();
  let sequence = 0;

  async function load(after) {
    const mine = ++sequence;
    const current = () => mine === sequence && !signal.aborted;
    if (busy) busy.setAttribute('aria-busy', 'true');
    try {
      const page = await fetchPage(after);
      if (!current()) return null;
      hideAlert(alert);
      render(page, after);
      return page;
    } catch (error) {
      if (!current()) return null;
      showError(alert, error);
      return onFailure(after);
    } finally {
      if (busy && mine === sequence) busy.removeAttribute('aria-busy');
    }
  }

  return { alert, load };
}

/**
 * A list with a pager ("Previous page", "Page N", "Next page"). content is the node render
 * fills (or holds what it fills); toolbar holds the list's filters, or is null. A page other
 * than the first that fails leaves the one shown, and the pager on it; so does a first page,
 * unless onFirstPageFailure is given: it then draws what stands for the failed first page
 * (such as an empty table, rather than an earlier filter's rows) and the pager goes to page 1.
 * busy: whether content carries aria-busy while a page loads.
 * Returns {element, alert, reset(), reload()}: the alert box (for errors of the rows' own
 * actions too), back to the first page (after a filter changed), the current page again.
 */
export function pagedList({ signal, toolbar = null, content, fetchPage, render, busy = false, onFirstPageFailure = null }) {
  const loader = listLoader({
    signal,
    fetchPage,
    render,
    busy: busy ? content : null,
    onFailure(after) {
      if (after || !onFirstPageFailure) return null;
      onFirstPageFailure();
      return { data: [], has_more: false, next_after: null };
    },
  });
  const pager = createPager(loader.load);
  return {
    element: listCard(toolbar, loader.alert, content, pager.element),
    alert: loader.alert,
    reset: () => pager.reset(),
    reload: () => pager.reload(),
  };
}

/**
 * A list that grows by a "More …" button (moreLabel): the first page, then each next one
 * after it. render(page, after) replaces the rows when after is null, else appends them.
 * Returns {element, reload()}: reload reads the first page again.
 */
export function growingList({ signal, content, moreLabel, fetchPage, render }) {
  const more = h('button', { type: 'button', class: 'button button-small', hidden: true }, moreLabel);
  let nextAfter = null;
  const loader = listLoader({
    signal,
    fetchPage,
    render(page, after) {
      render(page, after);
      nextAfter = page.has_more ? page.next_after : null;
      more.hidden = !nextAfter;
    },
  });
  more.addEventListener('click', () => loader.load(nextAfter));
  return {
    element: listCard(null, loader.alert, content, more),
    reload: () => loader.load(null),
  };
}
