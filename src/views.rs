//! The JSON a client sees of a tenant, written once per response.

use serde::{Serialize, Serializer};

use crate::domain::{Atomic, TenantId};

/// A tenant's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantState {
    Active,
    Tombstoned,
}

impl TenantState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Tombstoned => "tombstoned",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "active" => Some(Self::Active),
            "tombstoned" => Some(Self::Tombstoned),
            _ => None,
        }
    }
}

impl Serialize for TenantState {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl Serialize for TenantId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Amounts are JSON strings, so that no client's JSON parser rounds them.
impl Serialize for Atomic {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Budget {
    pub opening_deposit_atomic: Atomic,
    pub balance_atomic: Atomic,
}

/// The tenant overview: the body of a read and of a tombstone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tenant {
    pub id: TenantId,
    pub name: String,
    pub state: TenantState,
    pub created_at: String,
    pub tombstoned_at: Option<String>,
    pub budget: Budget,
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
struct Created<'a> {
    #[serde(flatten)]
    tenant: &'a Tenant,
    sidecar_config_env: SidecarEnv<'a>,
}

pub fn tenant_json(tenant: &Tenant) -> String {
    serde_json::to_string(tenant).expect("a tenant always serializes")
}

/// The body of a `201` to a create: the overview and the sidecar's environment.
pub fn created_json(tenant: &Tenant, public_url: &str, token: &str) -> String {
    serde_json::to_string(&Created {
        tenant,
        sidecar_config_env: SidecarEnv {
            TENANTD_URL: public_url,
            TENANTD_TENANT_ID: tenant.id.as_str(),
            TENANTD_TENANT_TOKEN: token,
        },
    })
    .expect("a created tenant always serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_json_has_the_contract_shape() {
        let tenant = Tenant {
            id: TenantId::parse("ten_01ARZ3NDEKTSV4RRFFQ69G5FAV").expect("id"),
            name: "acme-prod".into(),
            state: TenantState::Active,
            created_at: "2026-11-22T10:00:00.123Z".into(),
            tombstoned_at: None,
            budget: Budget {
                opening_deposit_atomic: Atomic::parse("340282366920938463463374607431768211455")
                    .expect("amount"),
                balance_atomic: Atomic::parse("1000").expect("amount"),
            },
        };
        let json: serde_json::Value =
            serde_json::from_str(&created_json(&tenant, "http://h:1", "tkn_x")).expect("json");
        assert_eq!(json["id"], "ten_01ARZ3NDEKTSV4RRFFQ69G5FAV");
        assert_eq!(json["state"], "active");
        assert_eq!(json["tombstoned_at"], serde_json::Value::Null);
        assert_eq!(
            json["budget"]["opening_deposit_atomic"],
            "340282366920938463463374607431768211455"
        );
        assert_eq!(json["sidecar_config_env"]["TENANTD_URL"], "http://h:1");
        assert_eq!(json["sidecar_config_env"]["TENANTD_TENANT_TOKEN"], "tkn_x");
        let overview: serde_json::Value =
            serde_json::from_str(&tenant_json(&tenant)).expect("json");
        assert!(overview.get("sidecar_config_env").is_none());
    }
}
