// Modal dialogs: a <dialog> with a heading, opened with showModal() and removed once closed.

import { h, uid, alertBox, showError, hideAlert } from './dom.js';

/**
 * Opens a modal dialog. content: nodes for the body; actions: buttons for the footer.
 * With onSubmit, the body is a form: submitting calls onSubmit(event), which resolves to
 * false to keep the dialog open (anything else closes it); an error thrown is shown in the
 * dialog's alert. While onSubmit runs, the footer's buttons (Cancel too) are disabled and
 * Esc does not close the dialog, so that a request under way is not abandoned. What must
 * follow a success (such as a one-time secret) belongs in onSubmit itself, not in onClose.
 * Returns {dialog, form, alert, close}.
 */
export function openDialog({ title, content = [], actions = [], onSubmit, onClose, wide = false }) {
  const headingId = uid('dlg');
  const alert = alertBox();
  const footer = h('div', { class: 'dialog-actions' }, actions);
  const dialog = h('dialog', { class: wide ? 'dialog dialog-wide' : 'dialog', 'aria-labelledby': headingId });
  const heading = h('h2', { id: headingId }, title);
  let form = null;
  let busy = false;
  if (onSubmit) {
    form = h('form', { class: 'dialog-inner', noValidate: true }, heading, alert, content, footer);
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      if (busy) return;
      busy = true;
      hideAlert(alert);
      const buttons = Array.from(footer.querySelectorAll('button')).filter((b) => !b.disabled);
      for (const button of buttons) button.disabled = true;
      form.setAttribute('aria-busy', 'true');
      try {
        const done = await onSubmit(event);
        if (done !== false) dialog.close();
      } catch (error) {
        showError(alert, error);
      } finally {
        busy = false;
        form.removeAttribute('aria-busy');
        for (const button of buttons) button.disabled = false;
      }
    });
    dialog.append(form);
  } else {
    dialog.append(h('div', { class: 'dialog-inner' }, heading, alert, content, footer));
  }
  // Esc: the browser fires "cancel" after a keydown the page may cancel too; neither closes
  // the dialog while a submission runs. (The keydown is caught on the document: the disabled
  // submit button leaves the focus on the page's body.)
  const holdEscape = (event) => {
    if (busy && event.key === 'Escape') event.preventDefault();
  };
  document.addEventListener('keydown', holdEscape, true);
  dialog.addEventListener('cancel', (event) => {
    if (busy) event.preventDefault();
  });
  dialog.addEventListener('close', () => {
    document.removeEventListener('keydown', holdEscape, true);
    dialog.remove();
    if (onClose) onClose();
  });
  document.body.append(dialog);
  dialog.showModal();
  return { dialog, form, alert, close: () => dialog.close() };
}

/** A "Cancel" button that closes the dialog it sits in. */
export function cancelButton(label = 'Cancel') {
  const button = h('button', { type: 'button', class: 'button' }, label);
  button.addEventListener('click', () => button.closest('dialog').close());
  return button;
}

/** A submit button. */
export function submitButton(label, variant = 'primary') {
  return h('button', { type: 'submit', class: `button button-${variant}` }, label);
}

/**
 * A confirmation dialog: title, explanation, a confirm button; action() runs on confirm.
 * Extra content (such as a name to type) may be given.
 */
export function confirmDialog({ title, text, confirmLabel, variant = 'danger', action, content = [], onClose }) {
  return openDialog({
    title,
    content: [h('p', {}, text), ...content],
    actions: [cancelButton(), submitButton(confirmLabel, variant)],
    onSubmit: action,
    onClose,
  });
}
