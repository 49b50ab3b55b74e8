// Copy-to-clipboard buttons that report the outcome in a role="status" element.

import { h } from './dom.js';

/** A button that copies getText() and says "Copied" (or why not) in statusNode. */
export function copyButton(label, getText, statusNode) {
  const button = h('button', { type: 'button', class: 'button button-small' }, label);
  button.addEventListener('click', async () => {
    statusNode.textContent = '';
    try {
      if (!navigator.clipboard) throw new Error('no clipboard');
      await navigator.clipboard.writeText(getText());
      statusNode.textContent = 'Copied';
    } catch {
      statusNode.textContent = 'Copying is not allowed here: select the text and copy it by hand.';
    }
  });
  return button;
}
