//! What the spending rows check at the end: what the service acknowledged on their budgets,
//! summed over the phases, against every budget read back.

use crate::client::Seeded;
use crate::server::Server;
use crate::wire;

/// What the service acknowledged on a row's budgets, summed over its phases, to be checked
/// against the budgets read at the end ([`check_spread`]).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Acknowledged {
    /// Atomic units spent by commits and charges.
    pub(crate) spent: u128,
    /// Atomic units of the holds granted, and of those a commit settled.
    pub(crate) held: u128,
    pub(crate) settled: u128,
    /// Credits of 1.
    pub(crate) credited: u128,
}

impl Acknowledged {
    /// The holds granted and not settled: still reserved (none expires within a run: the
    /// bench's holds last a day).
    pub(crate) fn outstanding(&self) -> u128 {
        self.held - self.settled
    }

    pub(crate) fn add(&mut self, other: Acknowledged) {
        self.spent += other.spent;
        self.held += other.held;
        self.settled += other.settled;
        self.credited += other.credited;
    }
}

/// A budget's figures as read back (or summed over budgets): credited, debited, spent,
/// reserved.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Figures {
    credited: u128,
    debited: u128,
    spent: u128,
    reserved: u128,
}

impl Figures {
    /// What is left: `None` where the budget is overspent.
    fn available(&self) -> Option<u128> {
        self.credited
            .checked_sub(self.debited)?
            .checked_sub(self.spent)?
            .checked_sub(self.reserved)
    }
}

/// Reads the budget at `target` with the admin's token.
fn read(server: &Server, target: &Seeded) -> Result<Figures, String> {
    let auth = format!("Bearer {}", server.token);
    let headers = [("Authorization", auth.as_str())];
    let addr = server.addr(0).to_string();
    let resp = wire::request(&addr, "GET", &target.budget_path, &headers, None);
    if resp.status != 200 {
        return Err(format!("{} answered {}", target.budget_path, resp.status));
    }
    let budget: serde_json::Value =
        serde_json::from_slice(&resp.body).map_err(|e| format!("a budget is not JSON: {e}"))?;
    let figure = |name: &str| -> Result<u128, String> {
        budget[name]
            .as_str()
            .and_then(|v| v.parse().ok())
            .ok_or(format!("a budget has no {name}: {budget}"))
    };
    Ok(Figures {
        credited: figure("credited_atomic")?,
        debited: figure("debited_atomic")?,
        spent: figure("spent_atomic")?,
        reserved: figure("reserved_atomic")?,
    })
}

/// Reads every budget of `targets` (each a tenant's default budget, opened with `deposit`)
/// and checks them against what was acknowledged on them: none overspent, and summed, the
/// deposits and credits credited, nothing debited, the commits and charges spent, the holds
/// not settled still reserved. Their figures, summed.
fn check(
    server: &Server,
    targets: &[Seeded],
    deposit: u128,
    acknowledged: Acknowledged,
) -> Result<Figures, String> {
    let mut read_back = Figures::default();
    for target in targets {
        let figures = read(server, target)?;
        if figures.available().is_none() {
            return Err(format!("budget {} is overspent", target.budget_path));
        }
        read_back.credited += figures.credited;
        read_back.debited += figures.debited;
        read_back.spent += figures.spent;
        read_back.reserved += figures.reserved;
    }
    let n = targets.len() as u128;
    let wanted = Figures {
        credited: deposit * n + acknowledged.credited,
        debited: 0,
        spent: acknowledged.spent,
        reserved: acknowledged.outstanding(),
    };
    if read_back != wanted {
        return Err(format!(
            "the {n} budgets read back do not add up to what was acknowledged: read              {read_back:?}, acknowledged (deposits and credits; commits and charges; holds              unsettled) {wanted:?}"
        ));
    }
    Ok(read_back)
}

/// Checks the one budget at `target` as [`check`] does, for the hot budget's note.
pub(crate) fn check_budget(
    server: &Server,
    target: &Seeded,
    deposit: u128,
    acknowledged: Acknowledged,
) -> Result<String, String> {
    let figures = check(server, std::slice::from_ref(target), deposit, acknowledged)?;
    let available = figures.available().ok_or("the hot budget is overspent")?;
    Ok(format!(
        "hot budget at the end: spent {} = the commits acknowledged, reserved {} = the holds \
         left unsettled, available {available}; nothing overspent",
        figures.spent, figures.reserved
    ))
}

/// Checks every budget of `targets` as [`check`] does, for the spread's note.
pub(crate) fn check_spread(
    server: &Server,
    targets: &[Seeded],
    deposit: u128,
    acknowledged: Acknowledged,
) -> Result<String, String> {
    let figures = check(server, targets, deposit, acknowledged)?;
    Ok(format!(
        "{} budgets read at the end: spent {} = the commits and charges acknowledged, \
         reserved {} = the holds left unsettled, credited = the deposits and {} credits, \
         nothing debited; none overspent",
        targets.len(),
        figures.spent,
        figures.reserved,
        acknowledged.credited
    ))
}
