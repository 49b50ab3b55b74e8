//! The console's files, embedded at build time from `src/console/assets/`: every file the
//! page loads is listed here, and nothing else is served (a test checks the list against the
//! directory).

/// Each file's name under `/console/` and its bytes.
pub(super) const FILES: &[(&str, &[u8])] = &[
    ("index.html", include_bytes!("assets/index.html")),
    ("api.js", include_bytes!("assets/api.js")),
    (
        "budget-actions.js",
        include_bytes!("assets/budget-actions.js"),
    ),
    ("budget-batch.js", include_bytes!("assets/budget-batch.js")),
    ("budget-card.js", include_bytes!("assets/budget-card.js")),
    ("budget-chart.js", include_bytes!("assets/budget-chart.js")),
    (
        "budget-figures.js",
        include_bytes!("assets/budget-figures.js"),
    ),
    (
        "budget-period.js",
        include_bytes!("assets/budget-period.js"),
    ),
    (
        "budget-thresholds.js",
        include_bytes!("assets/budget-thresholds.js"),
    ),
    ("budget-tree.js", include_bytes!("assets/budget-tree.js")),
    ("clipboard.js", include_bytes!("assets/clipboard.js")),
    ("console.css", include_bytes!("assets/console.css")),
    ("console.js", include_bytes!("assets/console.js")),
    ("dialog.js", include_bytes!("assets/dialog.js")),
    ("dom.js", include_bytes!("assets/dom.js")),
    ("event-types.js", include_bytes!("assets/event-types.js")),
    ("favicon.svg", include_bytes!("assets/favicon.svg")),
    ("list-page.js", include_bytes!("assets/list-page.js")),
    ("money.js", include_bytes!("assets/money.js")),
    ("new-tenant.js", include_bytes!("assets/new-tenant.js")),
    ("oidc.js", include_bytes!("assets/oidc.js")),
    ("page-events.js", include_bytes!("assets/page-events.js")),
    (
        "page-not-found.js",
        include_bytes!("assets/page-not-found.js"),
    ),
    ("page-sign-in.js", include_bytes!("assets/page-sign-in.js")),
    ("page-tenant.js", include_bytes!("assets/page-tenant.js")),
    ("page-tenants.js", include_bytes!("assets/page-tenants.js")),
    ("page-webhook.js", include_bytes!("assets/page-webhook.js")),
    (
        "page-webhooks.js",
        include_bytes!("assets/page-webhooks.js"),
    ),
    ("pager.js", include_bytes!("assets/pager.js")),
    ("period-form.js", include_bytes!("assets/period-form.js")),
    (
        "secret-dialog.js",
        include_bytes!("assets/secret-dialog.js"),
    ),
    ("session.js", include_bytes!("assets/session.js")),
    ("time.js", include_bytes!("assets/time.js")),
];
