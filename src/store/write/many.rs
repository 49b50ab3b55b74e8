//! Inserts of many rows a statement: a batch of operations' audit rows and ledger entries,
//! written when it ends ([`super::unwritten`]). A statement costs its parsing of parameters
//! and, on SQLite, a statement journal wherever a trigger or a check may abort it, whatever
//! its number of rows; each row is still checked in turn, and sees the rows before it.

use crate::store::StoreError;
use crate::store::sql::{Param, Sql};

/// Rows a statement inserts: the largest that fits first, so that any number of rows takes
/// a few statements, of a few texts the connection keeps prepared.
const ROWS: [usize; 7] = [64, 32, 16, 8, 4, 2, 1];

/// The statements that insert [`ROWS`] rows of one table.
pub(crate) struct ManyRows {
    /// The statement for each of [`ROWS`], in its order.
    texts: Vec<String>,
}

impl ManyRows {
    /// The statements `head` (`INSERT INTO t (a, b) VALUES `) followed by rows of `width`
    /// parameters each.
    pub(crate) fn new(head: &str, width: usize) -> Self {
        let texts = ROWS
            .iter()
            .map(|&n| {
                let rows: Vec<String> = (0..n)
                    .map(|row| {
                        let params: Vec<String> = (1..=width)
                            .map(|p| format!("?{}", row * width + p))
                            .collect();
                        format!("({})", params.join(", "))
                    })
                    .collect();
                format!("{head}{}", rows.join(", "))
            })
            .collect();
        Self { texts }
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
            let (i, n) = ROWS
                .iter()
                .copied()
                .enumerate()
                .find(|&(_, n)| n <= rest.len())
                .unwrap_or((ROWS.len() - 1, 1));
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
}
