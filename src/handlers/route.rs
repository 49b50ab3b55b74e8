//! A route of the API as data: its method, its path template, who may call it, and the
//! handler that answers it. Each resource's file lists its own rows (`ROUTES`) beside its
//! handlers; the router joins them into the one table every request is matched against
//! (`router::ROUTES`), from which the path index, the `Allow` headers and the check against
//! the OpenAPI document derive.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use hyper::Request;
use hyper::body::Incoming;

use super::HttpResponse;
use crate::app::App;
use crate::auth::Principal;
use crate::oidc::Permission;
use crate::problem::ApiError;
use crate::store::TokenCheck;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Anyone, without a token.
    Public,
    /// The admin only.
    Admin,
    /// The admin, or a principal with this permission on the tenant the path names (its
    /// first `{id}`).
    Tenant(Permission),
}

/// What a handler gets: the request and what routing found in it.
pub(crate) struct Call<'a> {
    /// What every handler shares.
    pub(crate) app: &'a App,
    /// `None` on a public route only.
    pub(crate) principal: Option<&'a Principal>,
    /// The check of the principal's tenant token, where it was left to the request's write
    /// ([`Route::checked_by_its_write`]): the handler hands it to that write.
    pub(crate) check: Option<Arc<TokenCheck>>,
    /// The request; a handler that reads its body [`take`]s it, and one left here has its
    /// body dropped by the router before the answer goes out.
    pub(crate) unread: &'a mut Option<Request<Incoming>>,
    /// The path's placeholders, in order (`{id}`, then `{budget_id}` or `{reservation_id}`).
    pub(crate) params: Params<'a>,
    /// The query string, if any.
    pub(crate) query: Option<&'a str>,
}

impl<'a> Call<'a> {
    /// Who asks, on a route that needs a token.
    pub(crate) fn who(&self) -> &'a Principal {
        self.principal
            .expect("the router authenticates every route that is not public")
    }

    /// The check of the tenant token, if it was left to the request's write.
    pub(crate) fn check(&self) -> Option<Arc<TokenCheck>> {
        self.check.clone()
    }

    /// The tenant id as written in the path.
    pub(crate) fn tenant(&self) -> &'a str {
        self.params[0]
    }

    /// The tenant id and the second id, as written in the path.
    pub(crate) fn pair(&self) -> (&'a str, &'a str) {
        (self.params[0], self.params[1])
    }
}

/// The values of a path's placeholders; unused ones are empty.
pub(crate) type Params<'a> = [&'a str; PARAMS_MAX];

/// Placeholders in one template, at most.
pub(crate) const PARAMS_MAX: usize = 3;

/// A handler's answer, to be awaited.
pub(crate) type Answer<'a> =
    Pin<Box<dyn Future<Output = Result<HttpResponse, ApiError>> + Send + 'a>>;

/// Hands the request to a handler that reads its body.
pub(crate) fn take(unread: &mut Option<Request<Incoming>>) -> Request<Incoming> {
    unread.take().expect("one handler takes a request, once")
}

/// A handler, as the table holds it.
pub(crate) type Handler = for<'a> fn(Call<'a>) -> Answer<'a>;

/// One row of the route table.
pub(crate) struct Route {
    /// The method; `HEAD` is answered wherever `GET` is.
    pub(crate) method: &'static str,
    /// The path as the OpenAPI document writes it.
    pub(crate) template: &'static str,
    /// Who may call it.
    pub(crate) access: Access,
    /// What answers it.
    pub(crate) handler: Handler,
    /// Whether its one effect is a write that its handler hands the tenant token's check to
    /// ([`crate::store::Store::write_checked`]), so that the check may be left to it.
    pub(crate) checked_by_its_write: bool,
}

impl Route {
    /// This row, its handler handing the tenant token's check to its one write.
    pub(crate) const fn checked_by_its_write(self) -> Self {
        Self {
            checked_by_its_write: true,
            ..self
        }
    }
}

/// Wraps a handler's body as a [`Handler`]: `handler!(|c| <expression using c>)`.
macro_rules! handler {
    (|$call:ident| $body:expr) => {
        |$call: $crate::handlers::route::Call<'_>| -> $crate::handlers::route::Answer<'_> {
            Box::pin(async move { $body })
        }
    };
}
pub(crate) use handler;

/// A row of a route table.
pub(crate) const fn route(
    method: &'static str,
    template: &'static str,
    access: Access,
    handler: Handler,
) -> Route {
    Route {
        method,
        template,
        access,
        handler,
        checked_by_its_write: false,
    }
}

/// Access under the tenant a path names.
pub(crate) const fn tenant(permission: Permission) -> Access {
    Access::Tenant(permission)
}
