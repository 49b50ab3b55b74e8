//! The admin's keep-alive connection, for seeding and for reading every budget at the end,
//! and what the groups' checks read of a budget.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;

use crate::client::{HOST, READ_CHUNK_BYTES, Seeded, connect, exchange, tenant_path};
use crate::server::Server;
use crate::wire;

/// The opening deposit of the budgets the tree groups make: more than any run can charge.
pub(crate) const UNSPENT: u64 = u64::MAX;

/// Budgets a page of a tenant's list asks for (the API's largest page).
const PAGE_LIMIT: u32 = 1000;

/// A keep-alive connection with the admin's token, for the seeding and the reading around
/// the measured slices: one request at a time, its answer read whole.
pub(crate) struct Admin {
    stream: TcpStream,
    auth: Arc<str>,
    request: Vec<u8>,
    buf: Vec<u8>,
}

impl Admin {
    pub(crate) async fn open(addr: SocketAddr, auth: Arc<str>) -> Result<Self, String> {
        Ok(Admin {
            stream: connect(addr).await?,
            auth,
            request: Vec::with_capacity(512),
            buf: Vec::with_capacity(READ_CHUNK_BYTES),
        })
    }

    /// Sends `method path` with `body` (JSON), and returns the answer's status and body.
    pub(crate) async fn send(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<(u16, Vec<u8>), String> {
        let headers = [
            HOST,
            ("Authorization", &*self.auth),
            ("Content-Type", "application/json"),
        ];
        // The content type (the last header) only with a body.
        let headers = &headers[..headers.len() - usize::from(body.is_none())];
        self.request.clear();
        wire::write_request(
            &mut self.request,
            method,
            path,
            wire::HTTP_11,
            headers,
            body,
        );
        let (frame, _) = exchange(&mut self.stream, &self.request, &mut self.buf).await?;
        let response = wire::Response::from_frame(&self.buf, &frame).map_err(|e| e.to_string())?;
        self.buf.drain(..frame.len);
        Ok((response.status, response.body))
    }

    /// Makes tenant `name` with [`UNSPENT`] in its default budget: the tenant. Any answer
    /// but `201` is an error.
    pub(crate) async fn create_tenant(&mut self, name: &str) -> Result<Seeded, String> {
        let body = format!(r#"{{"name":"{name}","opening_deposit_atomic":"{UNSPENT}"}}"#);
        let (status, created) = self
            .send("POST", "/v1/tenants", Some(body.as_bytes()))
            .await?;
        tenant_path(&created)
            .filter(|_| status == 201)
            .ok_or(format!(
                "tenant {name} was not made: {status} {}",
                String::from_utf8_lossy(&created)
            ))
    }

    /// Makes budget `name` of the tenant at `tenant` (its path) with [`UNSPENT`], under
    /// `parent` if any: the budget's id. Any answer but `201` is an error.
    pub(crate) async fn create_budget(
        &mut self,
        tenant: &str,
        name: &str,
        parent: Option<&str>,
    ) -> Result<String, String> {
        let parent = parent.map_or(String::new(), |id| format!(r#","parent_id":"{id}""#));
        let body = format!(r#"{{"name":"{name}","opening_deposit_atomic":"{UNSPENT}"{parent}}}"#);
        let path = format!("{tenant}/budgets");
        let (status, created) = self.send("POST", &path, Some(body.as_bytes())).await?;
        let id = json(&created)?["id"].as_str().map(str::to_owned);
        id.filter(|_| status == 201).ok_or(format!(
            "budget {name} of {tenant} was not made: {status} {}",
            String::from_utf8_lossy(&created)
        ))
    }

    /// Every budget of the tenant at `tenant` (its path), page after page. Any answer but
    /// `200` is an error.
    pub(crate) async fn budgets(&mut self, tenant: &str) -> Result<Vec<serde_json::Value>, String> {
        let (mut budgets, mut after) = (Vec::new(), String::new());
        loop {
            let path = format!("{tenant}/budgets?limit={PAGE_LIMIT}{after}");
            let (status, body) = self.send("GET", &path, None).await?;
            let mut page = json(&body)?;
            if status != 200 {
                return Err(format!("GET {path}: {status} {page}"));
            }
            let data = page
                .get_mut("data")
                .and_then(serde_json::Value::as_array_mut);
            let data = data.map(std::mem::take);
            budgets.extend(data.ok_or_else(|| format!("GET {path}: no data in {page}"))?);
            match page["next_after"].as_str() {
                Some(id) if page["has_more"] == true => after = format!("&after={id}"),
                _ => return Ok(budgets),
            }
        }
    }
}

/// The admin's `Bearer …`.
pub(crate) fn admin_auth(server: &Server) -> Arc<str> {
    format!("Bearer {}", server.token).into()
}

/// Checks a budget's figures against the invariant.
pub(crate) fn within_invariant(budget: &serde_json::Value) -> Result<(), String> {
    let available = budget["available_atomic"]
        .as_str()
        .and_then(|v| v.parse::<i128>().ok());
    let (credited, debited, spent, reserved) = (
        figure(budget, "credited_atomic")?,
        figure(budget, "debited_atomic")?,
        figure(budget, "spent_atomic")?,
        figure(budget, "reserved_atomic")?,
    );
    if available.is_none_or(|a| a < 0) || credited < debited + spent + reserved {
        return Err(format!("a budget is overspent: {budget}"));
    }
    Ok(())
}

/// The figure `name` of a budget (a decimal string).
pub(crate) fn figure(budget: &serde_json::Value, name: &str) -> Result<u128, String> {
    budget[name]
        .as_str()
        .and_then(|v| v.parse().ok())
        .ok_or(format!("the budget has no {name}: {budget}"))
}

/// A body as JSON.
pub(crate) fn json(body: &[u8]) -> Result<serde_json::Value, String> {
    serde_json::from_slice(body)
        .map_err(|e| format!("not JSON ({e}): {}", String::from_utf8_lossy(body)))
}

/// `n` with a comma between each group of three digits, as the notes write counts.
pub(crate) fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}
