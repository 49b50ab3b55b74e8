//! The JSON a client sees, written once per response. Only handlers use it.

use serde::Serialize;

use crate::domain::{Atomic, Tenant, TenantId, TenantName};
use crate::ids::TenantToken;

/// The budget as the tenant overview shows it.
#[derive(Serialize)]
struct BudgetView {
    opening_deposit_atomic: Atomic,
    balance_atomic: Atomic,
}

/// The tenant overview: the body of a read and of a tombstone.
#[derive(Serialize)]
struct TenantView<'a> {
    id: &'a TenantId,
    name: &'a TenantName,
    state: &'static str,
    created_at: &'a str,
    tombstoned_at: Option<&'a str>,
    budget: BudgetView,
}

impl<'a> From<&'a Tenant> for TenantView<'a> {
    fn from(tenant: &'a Tenant) -> Self {
        Self {
            id: &tenant.id,
            name: &tenant.name,
            state: tenant.state.name(),
            created_at: &tenant.created_at,
            tombstoned_at: tenant.state.tombstoned_at(),
            budget: BudgetView {
                opening_deposit_atomic: tenant.budget.opening_deposit,
                balance_atomic: tenant.budget.balance,
            },
        }
    }
}

/// The environment block for the tenant's sidecar. Every name matches `^[A-Z][A-Z0-9_]*$`
/// and no value holds NUL, CR or LF (the public URL is checked at start-up; the id and
/// token are generated).
#[derive(Serialize)]
#[allow(non_snake_case)]
struct SidecarEnv<'a> {
    TENANTD_URL: &'a str,
    TENANTD_TENANT_ID: &'a str,
    TENANTD_TENANT_TOKEN: &'a str,
}

#[derive(Serialize)]
struct CreatedView<'a> {
    #[serde(flatten)]
    tenant: TenantView<'a>,
    sidecar_config_env: SidecarEnv<'a>,
}

/// The overview of `tenant`.
pub(crate) fn tenant_json(tenant: &Tenant) -> String {
    serde_json::to_string(&TenantView::from(tenant)).expect("a tenant always serializes")
}

/// The body of a `201` to a create: the overview and the sidecar's environment.
pub(crate) fn created_json(tenant: &Tenant, token: &TenantToken, public_url: &str) -> String {
    serde_json::to_string(&CreatedView {
        tenant: TenantView::from(tenant),
        sidecar_config_env: SidecarEnv {
            TENANTD_URL: public_url,
            TENANTD_TENANT_ID: tenant.id.as_str(),
            TENANTD_TENANT_TOKEN: token.plaintext(),
        },
    })
    .expect("a created tenant always serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{TenantBudget, TenantState};

    #[test]
    fn created_json_has_the_contract_shape() {
        let tenant = Tenant {
            id: TenantId::parse("ten_01ARZ3NDEKTSV4RRFFQ69G5FAV").expect("id"),
            name: TenantName::parse("acme-prod").expect("name"),
            state: TenantState::Active,
            created_at: "2026-11-22T10:00:00.123Z".into(),
            budget: TenantBudget {
                opening_deposit: Atomic::parse("340282366920938463463374607431768211455")
                    .expect("amount"),
                balance: Atomic::parse("1000").expect("amount"),
            },
        };
        let token = TenantToken::mint(&tenant.id);
        let json: serde_json::Value =
            serde_json::from_str(&created_json(&tenant, &token, "http://h:1")).expect("json");
        assert_eq!(json["id"], "ten_01ARZ3NDEKTSV4RRFFQ69G5FAV");
        assert_eq!(json["state"], "active");
        assert_eq!(json["tombstoned_at"], serde_json::Value::Null);
        assert_eq!(
            json["budget"]["opening_deposit_atomic"],
            "340282366920938463463374607431768211455"
        );
        assert_eq!(json["sidecar_config_env"]["TENANTD_URL"], "http://h:1");
        assert_eq!(
            json["sidecar_config_env"]["TENANTD_TENANT_TOKEN"],
            token.plaintext()
        );
        let overview: serde_json::Value =
            serde_json::from_str(&tenant_json(&tenant)).expect("json");
        assert!(overview.get("sidecar_config_env").is_none());
    }

    #[test]
    fn a_tombstoned_overview_shows_when() {
        let tenant = Tenant {
            id: TenantId::parse("ten_01ARZ3NDEKTSV4RRFFQ69G5FAV").expect("id"),
            name: TenantName::parse("gone").expect("name"),
            state: TenantState::Tombstoned {
                at: "2026-11-22T11:00:00.000Z".into(),
            },
            created_at: "2026-11-22T10:00:00.123Z".into(),
            budget: TenantBudget {
                opening_deposit: Atomic::parse("1").expect("amount"),
                balance: Atomic::parse("1").expect("amount"),
            },
        };
        let json: serde_json::Value = serde_json::from_str(&tenant_json(&tenant)).expect("json");
        assert_eq!(json["state"], "tombstoned");
        assert_eq!(json["tombstoned_at"], "2026-11-22T11:00:00.000Z");
    }
}
