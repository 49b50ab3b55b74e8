//! One page of any list, in one statement: the filters, the cursor and the bound written
//! into the SQL alike for every list.

use std::fmt::Write as _;

use crate::store::sql::{Param, Row, RowError, Sql};
use crate::store::{ListQuery, Page, StoreError};

/// One page of a list: `WHERE <filters> AND id > after ORDER BY id LIMIT limit + 1`, in one
/// statement, so the page is one snapshot.
///
/// A `state` filter (`state_column`, if the query has one) is written into the SQL as a
/// literal, so that the database can use the partial indexes on one state (the query's states
/// come from a fixed list, never from the client's text).
pub(super) fn page<T>(
    db: &mut impl Sql,
    select: &str,
    id_column: &str,
    state_column: &str,
    filters: &[(&str, &str)],
    query: &ListQuery,
    read: impl FnMut(&Row<'_>) -> Result<T, RowError>,
) -> Result<Page<T>, StoreError> {
    let mut sql = select.to_owned();
    let mut params: Vec<Param<'_>> = Vec::with_capacity(filters.len() + 2);
    let mut clause = " WHERE";
    if let Some(state) = query.state {
        debug_assert!(
            state
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'.' || b == b'_'),
            "{state}"
        );
        let _ = write!(sql, "{clause} {state_column} = '{state}'");
        clause = " AND";
    }
    // Only events have `created_at` among the lists' filters; text order is time order.
    let created_after = query.created_after.map(|at| at.to_string());
    // Only tenants have a name among the lists' filters. Both sides in lower case: SQLite's
    // `lower` and PostgreSQL's under `COLLATE "C"` fold ASCII letters only, so both backends
    // match alike.
    let pattern = query.name_contains.as_deref().map(like_pattern);
    // Each condition on a text parameter: left side, operator, what follows the parameter.
    let texts = filters
        .iter()
        .map(|(column, value)| (*column, " = ", " AS TEXT)", *value))
        .chain(
            created_after
                .as_deref()
                .map(|at| ("created_at", " > ", " AS TEXT)", at)),
        )
        .chain(
            pattern
                .as_deref()
                .map(|pattern| ("lower(t.name)", " LIKE ", " AS TEXT) ESCAPE '\\'", pattern)),
        );
    for (left, operator, after, value) in texts {
        params.push(Param::Text(value));
        let n = params.len();
        let _ = write!(sql, "{clause} {left}{operator}CAST(?{n}{after}");
        clause = " AND";
    }
    let n = params.len();
    let _ = write!(
        sql,
        "{clause} {id} > ?{} ORDER BY {id} LIMIT CAST(?{} AS BIGINT)",
        n + 1,
        n + 2,
        id = id_column,
    );
    params.push(Param::Text(query.after.as_deref().unwrap_or("")));
    params.push(bound(query));
    Ok(cut(db.query(&sql, &params, read)?, query))
}

/// The `LIMIT` of a page's statement: one more than the page holds, which tells whether more
/// follow.
pub(super) fn bound(query: &ListQuery) -> Param<'static> {
    Param::Int(i64::try_from(query.limit).unwrap_or(i64::MAX - 1) + 1)
}

/// The page of `items`, read up to [`bound`].
pub(super) fn cut<T>(mut items: Vec<T>, query: &ListQuery) -> Page<T> {
    let has_more = items.len() > query.limit;
    items.truncate(query.limit);
    Page { items, has_more }
}

/// A `LIKE` pattern that matches any text holding `text`: its `%`, `_` and backslashes escaped.
pub(super) fn like_pattern(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 2);
    pattern.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}
