// The page for a route the console does not know.

import { h, routeLink } from './dom.js';

export function renderNotFound(main) {
  document.title = 'Not found · tenantd';
  main.append(h('div', { class: 'page' },
    h('h1', {}, 'Page not found'),
    h('p', {}, 'There is nothing at this address. ', routeLink('/tenants', 'Go to the tenants'), '.')));
}
