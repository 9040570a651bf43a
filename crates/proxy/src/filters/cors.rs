//! `cors`: cross-origin resource sharing as browsers expect it (the Fetch standard's CORS
//! protocol). A preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) is
//! answered here: 204 with the allowed origin, methods, headers and max age when the origin,
//! method and headers are allowed, 403 otherwise (a browser then refuses the request). Other
//! requests from an allowed origin go on, and their responses (the upstream's and Rampart's own)
//! get `Access-Control-Allow-Origin` and the rest. Responses that depend on the origin say
//! `Vary: Origin`.

use rampart_model::filter::Cors;

use crate::http::filter::{Answer, FilterCx, HttpFilter, RequestParts, ResponseParts, Verdict};

/// What a request's response needs: the allowed origin to echo.
#[derive(Default)]
pub struct CorsRequest {
    origin: Option<String>,
}

impl HttpFilter for Cors {
    type State = CorsRequest;
    type WorkerState = ();

    async fn request_head(&self, _: &mut FilterCx<'_>, state: &mut CorsRequest, req: &mut RequestParts<'_>) -> Verdict {
        let Some(origin) = req.header("origin") else {
            return Verdict::Continue;
        };
        let allowed = self.allows_origin(origin);
        match req.header("access-control-request-method") {
            Some(method) if req.method == b"OPTIONS" => Verdict::Respond(self.preflight(origin, allowed, method, req)),
            _ => {
                if allowed {
                    state.origin = Some(String::from_utf8_lossy(origin).into_owned());
                }
                Verdict::Continue
            }
        }
    }

    fn response_head(&self, _: &mut FilterCx<'_>, state: &mut CorsRequest, resp: &mut ResponseParts<'_>) {
        if !self.any_origin() || self.credentials {
            resp.add_header("vary", "Origin");
        }
        let Some(origin) = &state.origin else { return };
        resp.set_header("access-control-allow-origin", self.allow_origin_value(origin));
        if self.credentials {
            resp.set_header("access-control-allow-credentials", "true");
        }
        if !self.expose_headers.is_empty() {
            resp.set_header("access-control-expose-headers", &self.expose_headers.join(", "));
        }
    }
}

/// The rest of the CORS protocol, on the settings.
trait Preflight {
    fn allow_origin_value<'o>(&self, origin: &'o str) -> &'o str;
    fn preflight(&self, origin: &[u8], allowed: bool, method: &[u8], req: &RequestParts<'_>) -> Answer;
}

impl Preflight for Cors {
    /// `*` when any origin may read without credentials, else the origin itself.
    fn allow_origin_value<'o>(&self, origin: &'o str) -> &'o str {
        if self.any_origin() && !self.credentials {
            "*"
        } else {
            origin
        }
    }

    fn preflight(&self, origin: &[u8], allowed: bool, method: &[u8], req: &RequestParts<'_>) -> Answer {
        let refuse = |why: &str| {
            Answer::plain(403, "cors_rejected", why).with_header(
                "vary",
                "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
            )
        };
        if !allowed {
            return refuse("origin not allowed");
        }
        // Methods are case-sensitive; the CORS-safelisted ones need no permission.
        let safelisted = matches!(method, b"GET" | b"HEAD" | b"POST");
        if !safelisted && !self.methods.iter().any(|m| m.as_bytes() == method) {
            return refuse("method not allowed");
        }
        let mut requested = Vec::new();
        for value in req.header_values("access-control-request-headers") {
            for name in value.split(|&b| b == b',') {
                let name = String::from_utf8_lossy(name).trim().to_ascii_lowercase();
                if !name.is_empty() {
                    requested.push(name);
                }
            }
        }
        if let Some(allowed) = &self.allow_headers {
            if let Some(name) = requested.iter().find(|n| !allowed.contains(n)) {
                return refuse(&format!("header {name} not allowed"));
            }
        }
        let origin = String::from_utf8_lossy(origin);
        let mut answer = Answer {
            status: 204,
            headers: Vec::new(),
            body: Default::default(),
            reason: None,
        }
        .with_header("access-control-allow-origin", self.allow_origin_value(&origin))
        .with_header("access-control-allow-methods", self.methods.join(", "));
        if !requested.is_empty() {
            answer = answer.with_header("access-control-allow-headers", requested.join(", "));
        }
        if self.credentials {
            answer = answer.with_header("access-control-allow-credentials", "true");
        }
        if let Some(age) = self.max_age {
            answer = answer.with_header("access-control-max-age", age.to_string());
        }
        answer.with_header(
            "vary",
            "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
        )
    }
}
