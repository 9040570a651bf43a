//! `[tracing]`: W3C Trace Context on proxied requests (issue 41, first part: the context is read,
//! continued and propagated upstream, and its trace id logged; spans are not exported yet).

/// How requests are traced.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// The share of new traces marked sampled (a request with a valid `traceparent` keeps its
    /// caller's decision).
    pub sampling: f64,
}

impl Default for TraceSettings {
    fn default() -> Self {
        TraceSettings { sampling: 1.0 }
    }
}
