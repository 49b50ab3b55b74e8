//! A tenant's overview, and the answer to its create with the sidecar's environment.

use serde::Serialize;

use super::budgets::BudgetView;
use super::{page_json, to_json};
use crate::domain::{Name, Page, Tenant, TenantId, Timestamp};
use crate::ids::TenantToken;

/// The tenant overview: the body of a read and of a tombstone, and an item of a list.
#[derive(Serialize)]
pub(super) struct TenantView<'a> {
    id: &'a TenantId,
    name: &'a Name,
    state: &'static str,
    created_at: Timestamp,
    tombstoned_at: Option<Timestamp>,
    budget: BudgetView<'a>,
}

impl<'a> From<&'a Tenant> for TenantView<'a> {
    fn from(tenant: &'a Tenant) -> Self {
        Self {
            id: &tenant.id,
            name: &tenant.name,
            state: tenant.state.name(),
            created_at: tenant.created_at,
            tombstoned_at: tenant.state.tombstoned_at(),
            budget: BudgetView::from(&tenant.budget),
        }
    }
}

/// The environment block for the tenant's sidecar. Every name matches `^[A-Z][A-Z0-9_]*$`
/// and no value holds NUL, CR or LF (the public URL is checked at start-up; the ids and
/// token are generated).
#[derive(Serialize)]
#[allow(non_snake_case)]
struct SidecarEnv<'a> {
    TENANTD_URL: &'a str,
    TENANTD_TENANT_ID: &'a str,
    TENANTD_TENANT_TOKEN: &'a str,
    TENANTD_BUDGET_ID: &'a str,
}

#[derive(Serialize)]
struct CreatedView<'a> {
    #[serde(flatten)]
    tenant: TenantView<'a>,
    sidecar_config_env: SidecarEnv<'a>,
}

/// The overview of `tenant`.
pub(crate) fn tenant_json(tenant: &Tenant) -> String {
    to_json(&TenantView::from(tenant))
}

/// The body of a `201` to a create: the overview and the sidecar's environment.
pub(crate) fn created_json(tenant: &Tenant, token: &TenantToken, public_url: &str) -> String {
    to_json(&CreatedView {
        tenant: TenantView::from(tenant),
        sidecar_config_env: SidecarEnv {
            TENANTD_URL: public_url,
            TENANTD_TENANT_ID: tenant.id.as_str(),
            TENANTD_TENANT_TOKEN: token.plaintext(),
            TENANTD_BUDGET_ID: tenant.budget.id.as_str(),
        },
    })
}

/// A page of tenants.
pub(crate) fn tenants_json(page: &Page<Tenant>) -> String {
    page_json::<_, TenantView<'_>, _>(page, |t| &t.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Atomic, Budget, BudgetState, Figures, TenantState, Thresholds, Unit};

    fn tenant(state: TenantState) -> Tenant {
        let id = TenantId::parse("ten_01ARZ3NDEKTSV4RRFFQ69G5FAV").expect("id");
        let at = Timestamp::parse("2026-11-22T10:00:00.123Z").expect("time");
        let deposit = Atomic::parse("340282366920938463463374607431768211455").expect("amount");
        Tenant {
            budget: Budget {
                id: id.default_budget(),
                tenant_id: id.clone(),
                name: Name::parse("default").expect("name"),
                parent_id: None,
                unit: Unit::atomic(),
                state: match state {
                    TenantState::Active => BudgetState::Open,
                    TenantState::Tombstoned { at } => BudgetState::Closed { at },
                },
                created_at: at,
                opening_deposit: deposit,
                figures: Figures {
                    reserved: 5,
                    ..Figures::opening(deposit)
                },
                policy: None,
                current: None,
                thresholds: Thresholds::default(),
            },
            id,
            name: Name::parse("acme-prod").expect("name"),
            state,
            created_at: at,
        }
    }

    #[test]
    fn created_json_has_the_contract_shape() {
        let tenant = tenant(TenantState::Active);
        let token = TenantToken::mint(&tenant.id);
        let json: serde_json::Value =
            serde_json::from_str(&created_json(&tenant, &token, "http://h:1")).expect("json");
        assert_eq!(json["id"], "ten_01ARZ3NDEKTSV4RRFFQ69G5FAV");
        assert_eq!(json["state"], "active");
        assert_eq!(json["created_at"], "2026-11-22T10:00:00.123Z");
        assert_eq!(json["tombstoned_at"], serde_json::Value::Null);
        let budget = &json["budget"];
        assert_eq!(budget["id"], "bud_01ARZ3NDEKTSV4RRFFQ69G5FAV");
        assert_eq!(budget["name"], "default");
        assert_eq!(budget["unit"], "atomic");
        assert_eq!(budget["state"], "open");
        assert_eq!(
            budget["credited_atomic"],
            "340282366920938463463374607431768211455"
        );
        assert_eq!(budget["reserved_atomic"], "5");
        assert_eq!(
            budget["available_atomic"],
            "340282366920938463463374607431768211450"
        );
        let env = &json["sidecar_config_env"];
        assert_eq!(env["TENANTD_URL"], "http://h:1");
        assert_eq!(env["TENANTD_TENANT_TOKEN"], token.plaintext());
        assert_eq!(env["TENANTD_BUDGET_ID"], "bud_01ARZ3NDEKTSV4RRFFQ69G5FAV");
        let overview: serde_json::Value =
            serde_json::from_str(&tenant_json(&tenant)).expect("json");
        assert!(overview.get("sidecar_config_env").is_none());
    }

    #[test]
    fn a_tombstoned_overview_shows_when_and_a_closed_budget() {
        let at = Timestamp::parse("2026-11-22T11:00:00.000Z").expect("time");
        let json: serde_json::Value =
            serde_json::from_str(&tenant_json(&tenant(TenantState::Tombstoned { at })))
                .expect("json");
        assert_eq!(json["state"], "tombstoned");
        assert_eq!(json["tombstoned_at"], "2026-11-22T11:00:00.000Z");
        assert_eq!(json["budget"]["state"], "closed");
        assert_eq!(json["budget"]["closed_at"], "2026-11-22T11:00:00.000Z");
    }

    #[test]
    fn pages_name_their_last_id_only_when_more_follow() {
        let one = tenant(TenantState::Active);
        let more = Page {
            items: vec![one.clone()],
            has_more: true,
        };
        let json: serde_json::Value = serde_json::from_str(&tenants_json(&more)).expect("json");
        assert_eq!(json["next_after"], "ten_01ARZ3NDEKTSV4RRFFQ69G5FAV");
        assert_eq!(json["data"][0]["name"], "acme-prod");
        let last = Page {
            items: vec![one],
            has_more: false,
        };
        let json: serde_json::Value = serde_json::from_str(&tenants_json(&last)).expect("json");
        assert_eq!(json["next_after"], serde_json::Value::Null);
        assert_eq!(json["has_more"], false);
    }
}
