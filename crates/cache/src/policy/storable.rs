//! Whether a shared cache may store a response (RFC 9111 section 3, with 3.5 for requests with
//! credentials), and which of its header fields it keeps (section 3.1).

use super::control::Directives;
use super::freshness::heuristically_cacheable;
use super::{list_items, FieldSource};

/// Why a response is not stored (each maps to the RFC's rule; shown in `Cache-Status`'s
/// `detail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStored {
    /// Only responses to `GET` are stored.
    Method,
    /// An interim response, a status the cache does not understand under `must-understand`, or a
    /// partial response (206), which is not stored here.
    Status,
    /// `no-store` in the request or the response.
    NoStore,
    /// `private` (unqualified) in the response.
    Private,
    /// A request with `Authorization`, and a response that does not allow a shared cache to
    /// store it (`public`, `s-maxage` or `must-revalidate`).
    Authorization,
    /// `Vary: *`: no later request can match it.
    VaryAll,
    /// Neither explicit freshness, nor `public`, nor a heuristically cacheable status.
    NoFreshness,
}

impl NotStored {
    /// A short token for logs and `Cache-Status`.
    pub fn as_str(self) -> &'static str {
        match self {
            NotStored::Method => "method",
            NotStored::Status => "status",
            NotStored::NoStore => "no-store",
            NotStored::Private => "private",
            NotStored::Authorization => "authorization",
            NotStored::VaryAll => "vary-all",
            NotStored::NoFreshness => "no-freshness",
        }
    }
}

/// The status codes whose caching rules this cache knows and follows (for `must-understand`,
/// section 5.2.2.3): the final ones RFC 9110 defines, but 206 (ranges are not stored).
pub fn understood(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 300 | 301 | 302 | 303 | 307 | 308 | 400..=418 | 421 | 422 | 426 | 500..=505
    )
}

/// Whether a shared cache may store `status` with `response`'s fields and directives, given the
/// request's method, fields and directives (section 3).
pub fn may_store(
    method: &[u8],
    request: &(impl FieldSource + ?Sized),
    request_cc: &Directives,
    status: u16,
    response: &(impl FieldSource + ?Sized),
    response_cc: &Directives,
) -> Result<(), NotStored> {
    if method != b"GET" {
        return Err(NotStored::Method);
    }
    if status < 200 || status == 206 {
        return Err(NotStored::Status);
    }
    // must-understand: stored only with a status whose rules are known, and then no-store
    // (its fallback for caches that do not know the directive) is set aside.
    if response_cc.must_understand {
        if !understood(status) {
            return Err(NotStored::Status);
        }
    } else if response_cc.no_store {
        return Err(NotStored::NoStore);
    }
    if request_cc.no_store {
        return Err(NotStored::NoStore);
    }
    if response_cc.private == super::control::FieldScope::All {
        return Err(NotStored::Private);
    }
    let allows_shared = response_cc.public || response_cc.s_maxage.is_some() || response_cc.must_revalidate;
    if request.value_of(b"authorization").is_some() && !allows_shared {
        return Err(NotStored::Authorization);
    }
    if list_items(response, b"vary").any(|v| v == b"*") {
        return Err(NotStored::VaryAll);
    }
    let explicit =
        response_cc.max_age.is_some() || response_cc.s_maxage.is_some() || response.value_of(b"expires").is_some();
    if !(explicit || response_cc.public || heuristically_cacheable(status)) {
        return Err(NotStored::NoFreshness);
    }
    Ok(())
}

/// The fields a connection's hop owns, never stored (section 3.1): `Connection` and the fields
/// it names, and the hop-by-hop fields.
const HOP_BY_HOP: [&[u8]; 6] = [
    b"connection",
    b"proxy-connection",
    b"keep-alive",
    b"te",
    b"transfer-encoding",
    b"upgrade",
];

/// Whether field `name` of `response` is kept when it is stored: not a hop-by-hop field nor one
/// `Connection` names, nor one a qualified `no-cache` or `private` names (section 3.1: a shared
/// cache then reuses the response without them). For every field of one response, use
/// [`StoredFields`], which reads `Connection` once.
pub fn stores_field(name: &[u8], response: &(impl FieldSource + ?Sized), cc: &Directives) -> bool {
    StoredFields::of(response, cc).keeps(name)
}

/// Which fields of one response are kept when it is stored (see [`stores_field`]).
pub struct StoredFields<'a> {
    /// The fields `Connection` names.
    connection: Vec<&'a [u8]>,
    cc: &'a Directives,
}

impl<'a> StoredFields<'a> {
    pub fn of(response: &'a (impl FieldSource + ?Sized), cc: &'a Directives) -> Self {
        StoredFields {
            connection: list_items(response, b"connection").collect(),
            cc,
        }
    }

    pub fn keeps(&self, name: &[u8]) -> bool {
        if HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h)) {
            return false;
        }
        if self.connection.iter().any(|c| c.eq_ignore_ascii_case(name)) {
            return false;
        }
        !(self.cc.no_cache.names(name) || self.cc.private.names(name))
    }
}
