// Modal dialogs: a <dialog> with a heading, opened with showModal() and removed once closed.

import { h, uid, alertBox, showError, hideAlert } from './dom.js';

/**
 * Opens a modal dialog. content: nodes for the body; actions: buttons for the footer.
 * With onSubmit, the body is a form: submitting calls onSubmit(event), which resolves to
 * true to close the dialog; an error thrown is shown in the dialog's alert.
 * Returns {dialog, form, alert, close}.
 */
export function openDialog({ title, content = [], actions = [], onSubmit, onClose, wide = false }) {
  const headingId = uid('dlg');
  const alert = alertBox();
  const footer = h('div', { class: 'dialog-actions' }, actions);
  const dialog = h('dialog', { class: wide ? 'dialog dialog-wide' : 'dialog', 'aria-labelledby': headingId });
  const heading = h('h2', { id: headingId }, title);
  let form = null;
  if (onSubmit) {
    form = h('form', { class: 'dialog-inner', noValidate: true }, heading, alert, content, footer);
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      const submitter = form.querySelector('button[type="submit"]');
      if (submitter && submitter.disabled) return;
      hideAlert(alert);
      if (submitter) submitter.disabled = true;
      form.setAttribute('aria-busy', 'true');
      try {
        const done = await onSubmit(event);
        if (done !== false) dialog.close();
      } catch (error) {
        showError(alert, error);
      } finally {
        form.removeAttribute('aria-busy');
        if (submitter && submitter.isConnected) submitter.disabled = false;
      }
    });
    dialog.append(form);
  } else {
    dialog.append(h('div', { class: 'dialog-inner' }, heading, alert, content, footer));
  }
  dialog.addEventListener('close', () => {
    dialog.remove();
    if (onClose) onClose();
  });
  document.body.append(dialog);
  dialog.showModal();
  return { dialog, form, alert, close: () => dialog.close() };
}

/** A "Cancel" button that closes the dialog it sits in. */
export function cancelButton(label = 'Cancel') {
  return h('button', {
    type: 'button',
    class: 'button',
    onclick: (event) => event.target.closest('dialog').close(),
  }, label);
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
