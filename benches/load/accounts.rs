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

/// A budget's figures as read back: credited, debited, spent, reserved.
#[derive(Clone, Copy)]
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

/// Reads the budget at `target` and checks it against what was acknowledged: every commit
/// spent exactly once, every unsettled hold still reserved, and the invariant.
pub(crate) fn check_budget(
    server: &Server,
    target: &Seeded,
    deposit: u128,
    committed: u128,
    outstanding: u128,
) -> Result<String, String> {
    let figures = read(server, target)?;
    let Figures {
        credited,
        debited,
        spent,
        reserved,
    } = figures;
    if credited != deposit || debited != 0 || spent != committed || reserved != outstanding {
        return Err(format!(
            "the hot budget does not match what was acknowledged: credited {credited} (deposit \
             {deposit}), spent {spent} (commits acknowledged {committed}), reserved {reserved} \
             (holds unsettled {outstanding})"
        ));
    }
    let available = figures.available().ok_or("the hot budget is overspent")?;
    Ok(format!(
        "hot budget at the end: spent {spent} = the commits acknowledged, reserved {reserved} = \
         the holds left unsettled, available {available}; nothing overspent"
    ))
}

/// Reads every budget of `targets` (each a tenant's default budget, opened with `deposit`)
/// and checks them against what was acknowledged on them: the spends and credits exactly,
/// the holds not settled still reserved, and no budget overspent.
pub(crate) fn check_spread(
    server: &Server,
    targets: &[Seeded],
    deposit: u128,
    acknowledged: Acknowledged,
) -> Result<String, String> {
    let (mut credited, mut spent, mut reserved) = (0u128, 0u128, 0u128);
    for target in targets {
        let figures = read(server, target)?;
        if figures.available().is_none() {
            return Err(format!("budget {} is overspent", target.budget_path));
        }
        credited += figures.credited;
        spent += figures.spent;
        reserved += figures.reserved;
    }
    let n = targets.len() as u128;
    let (wanted_credited, outstanding) = (
        deposit * n + acknowledged.credited,
        acknowledged.outstanding(),
    );
    if credited != wanted_credited || spent != acknowledged.spent || reserved != outstanding {
        return Err(format!(
            "the {n} budgets do not add up to what was acknowledged: credited {credited} \
             (deposits and credits {wanted_credited}), spent {spent} (commits and charges {}), \
             reserved {reserved} (holds unsettled {outstanding})",
            acknowledged.spent
        ));
    }
    Ok(format!(
        "{n} budgets read at the end: spent {spent} = the commits and charges acknowledged, \
         reserved {reserved} = the holds left unsettled, credited = the deposits and {} \
         credits; none overspent",
        acknowledged.credited
    ))
}
