//! Databases of their own on the test cluster, for the unit tests that need PostgreSQL
//! (`make test` starts the cluster; see scripts/with-postgres.sh).

use super::blocking::Blocking;

/// The superuser's URL the test cluster gives.
pub(crate) const ADMIN_URL: &str = "TENANTD_TEST_POSTGRES_ADMIN_URL";
/// The unprivileged role's URL the test cluster gives.
pub(crate) const URL: &str = "TENANTD_TEST_POSTGRES_URL";

pub(crate) fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: the PostgreSQL tests run under `make test`, or \
             scripts/with-postgres.sh cargo test"
        )
    })
}

/// A database of its own on the test cluster, owned by the role `tenantd`, dropped at
/// the end.
pub(crate) struct Scratch {
    name: String,
    admin: String,
    /// The database's URL, for the role `tenantd`.
    pub(crate) url: String,
}

impl Scratch {
    /// A new, empty database; `tag` tells it apart from the others of this process.
    pub(crate) fn new(tag: &str) -> Self {
        let admin = var(ADMIN_URL);
        let base = var(URL);
        let name = format!("blocking_{tag}_{}", std::process::id());
        let mut conn = Blocking::connect(&admin).expect("the superuser connects");
        conn.batch(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .expect("an old database dropped");
        conn.batch(&format!("CREATE DATABASE {name} OWNER tenantd"))
            .expect("a database created");
        let (base, query) = match base.split_once('?') {
            Some((base, query)) => (base, format!("?{query}")),
            None => (base.as_str(), String::new()),
        };
        let Some((server, _)) = base.rsplit_once('/') else {
            panic!("{URL} names no database");
        };
        let url = format!("{server}/{name}{query}");
        Self { name, admin, url }
    }

    /// A connection as the role `tenantd`.
    pub(crate) fn connect(&self) -> Blocking {
        Blocking::connect(&self.url).expect("the role tenantd connects")
    }

    /// A connection as the superuser.
    pub(crate) fn admin(&self) -> Blocking {
        Blocking::connect(&self.admin).expect("the superuser connects")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Ok(mut conn) = Blocking::connect(&self.admin) {
            let _ = conn.batch(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}
