//! Statements of many rows: a batch of operations' audit rows and ledger entries, written
//! when it ends ([`super::unwritten`]), and on PostgreSQL its budgets' figures. A statement
//! costs its parsing of parameters and, on SQLite, a statement journal wherever a trigger or
//! a check may abort it, whatever its number of rows; on PostgreSQL a message each way, and
//! its checks prepared again. Each row is still checked in turn, and sees the rows before
//! it.

use crate::store::StoreError;
use crate::store::sql::{Param, Sql};

/// Rows a statement writes: the largest that fits first, so that any number of rows takes
/// a few statements, of a few texts the connection keeps prepared.
const ROWS: &[usize] = &[64, 32, 16, 8, 4, 2, 1];

/// [`ROWS`] where writers share the database (PostgreSQL), with every count up to 64: a batch
/// of up to 64 commands writes each table in one statement. Each count is a statement the
/// connection prepares once. Each statement is a round of PostgreSQL's protocol of its own,
/// which the server answers in a write of its own: a batch of 31 charges wrote each table in
/// three (16, 8 and 7 rows).
pub(crate) const SHARED_ROWS: &[usize] = &{
    let mut sizes = [0; 64];
    let mut i = 0;
    while i < sizes.len() {
        sizes[i] = sizes.len() - i;
        i += 1;
    }
    sizes
};

/// The statements that write [`ROWS`] rows (or another list of counts) of one table.
pub(crate) struct ManyRows {
    /// The counts of rows, largest first, ending with 1.
    sizes: &'static [usize],
    /// The statement for each of `sizes`, in its order.
    texts: Vec<String>,
}

impl ManyRows {
    /// The statements `head` (`INSERT INTO t (a, b) VALUES `) followed by rows of `width`
    /// parameters each.
    pub(crate) fn new(head: &str, width: usize) -> Self {
        Self::shaped(head, &vec!["{}"; width], "", ROWS)
    }

    /// The statements `head`, rows of one parameter a column, each in its template of
    /// `columns` (`{}` is the parameter: `CAST({} AS NUMERIC)`), then `tail`, for each count
    /// of rows in `sizes` (largest first, ending with 1).
    pub(crate) fn shaped(
        head: &str,
        columns: &[&str],
        tail: &str,
        sizes: &'static [usize],
    ) -> Self {
        let width = columns.len();
        let texts = sizes
            .iter()
            .map(|&n| {
                let rows: Vec<String> = (0..n)
                    .map(|row| {
                        let params: Vec<String> = columns
                            .iter()
                            .enumerate()
                            .map(|(p, column)| {
                                column.replace("{}", &format!("?{}", row * width + p + 1))
                            })
                            .collect();
                        format!("({})", params.join(", "))
                    })
                    .collect();
                format!("{head}{}{tail}", rows.join(", "))
            })
            .collect();
        Self { sizes, texts }
    }

    /// Inserts `rows` in order, each row's parameters as `params` gives them.
    pub(crate) fn insert<'a, T, const W: usize>(
        &self,
        db: &mut impl Sql,
        rows: &'a [T],
        params: impl Fn(&'a T) -> [Param<'a>; W],
    ) -> Result<(), StoreError> {
        let mut rest = rows;
        while !rest.is_empty() {
            let (i, n) = self
                .sizes
                .iter()
                .copied()
                .enumerate()
                .find(|&(_, n)| n <= rest.len())
                .unwrap_or((self.sizes.len() - 1, 1));
            let (these, after) = rest.split_at(n);
            let bound: Vec<Param<'a>> = these.iter().flat_map(&params).collect();
            db.send(&self.texts[i], &bound)?;
            rest = after;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_statement_numbers_its_parameters_row_after_row() {
        let many = ManyRows::new("INSERT INTO t (a, b) VALUES ", 2);
        assert_eq!(
            many.texts[ROWS.len() - 1],
            "INSERT INTO t (a, b) VALUES (?1, ?2)"
        );
        assert_eq!(
            many.texts[ROWS.len() - 2],
            "INSERT INTO t (a, b) VALUES (?1, ?2), (?3, ?4)"
        );
        assert!(many.texts[0].ends_with("(?127, ?128)"), "{}", many.texts[0]);
    }

    #[test]
    fn a_shaped_statement_wraps_each_parameter_and_ends_with_its_tail() {
        let many = ManyRows::shaped(
            "UPDATE t SET v = x.v FROM (VALUES ",
            &["{}", "CAST({} AS NUMERIC)"],
            ") AS x(id, v) WHERE t.id = x.id",
            SHARED_ROWS,
        );
        let text = |n: usize| {
            let i = SHARED_ROWS.iter().position(|&s| s == n).expect("a count");
            many.texts[i].clone()
        };
        assert_eq!(
            text(2),
            "UPDATE t SET v = x.v FROM (VALUES (?1, CAST(?2 AS NUMERIC)), \
             (?3, CAST(?4 AS NUMERIC))) AS x(id, v) WHERE t.id = x.id"
        );
        assert!(text(7).contains("(?13, CAST(?14 AS NUMERIC))) AS x"));
        assert!(
            (1..=64).all(|n| SHARED_ROWS.contains(&n)),
            "a batch of up to 64 writes a table in one statement"
        );
        assert_eq!(SHARED_ROWS.last(), Some(&1), "any count can be written");
        assert!(SHARED_ROWS.windows(2).all(|w| w[0] > w[1]), "largest first");
    }
}
