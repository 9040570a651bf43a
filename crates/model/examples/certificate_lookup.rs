//! What choosing a certificate costs a handshake with 1, 100 and 10,000 names loaded: the ACME
//! table (`AcmeShared::certificate`, what `SniResolver` asks first for a listener with `acme`
//! names), the file certificates' table (`CertificateSet::candidates`), and the strict-SNI check
//! over a listener's `acme` names (`ListenerTls::knows`); and what serving that many kept
//! certificates at a start costs, all at once (`install_all`) and one by one (`install`).
//!
//!   cargo run --release -p rampart-model --example certificate_lookup
//!
//! Each figure is the best of 5 runs, in nanoseconds per lookup (the names asked for cycle through
//! all those loaded, so a large table is not served from one cache line).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart_model::acme::AcmeShared;
use rampart_model::tls::{CertificateSet, ListenerTls, SniResolver};
use rustls::sign::CertifiedKey;

const LOOKUPS: usize = 2_000_000;

fn main() {
    let key = key();
    println!("names    acme lookup   file lookup   strict-SNI knows   install_all   install one by one");
    for n in [1usize, 100, 10_000] {
        let names: Vec<String> = (0..n).map(|i| format!("host-{i}.customers.example.net")).collect();
        let acme = Arc::new(AcmeShared::default());
        let entries: Vec<(&str, Arc<CertifiedKey>)> = names.iter().map(|n| (n.as_str(), key.clone())).collect();
        acme.install_all(&entries);
        let mut files = CertificateSet::default();
        for name in &names {
            files.add(std::slice::from_ref(name), &key);
        }
        let mut sorted = names.clone();
        sorted.sort();
        let listener = listener(sorted, &acme);

        let acme_ns = per_lookup(&names, |name| acme.certificate(name).is_some());
        let file_ns = per_lookup(&names, |name| !files.candidates(Some(name), true).is_empty());
        let knows_ns = per_lookup(&names, |name| listener.knows(Some(name)));
        let all = best(|| {
            let table = AcmeShared::default();
            table.install_all(&entries);
            black_box(&table);
        });
        let one_by_one = best(|| {
            let table = AcmeShared::default();
            for (name, key) in &entries {
                table.install(name, key.clone());
            }
            black_box(&table);
        });
        println!(
            "{n:>6}   {acme_ns:>8.1} ns   {file_ns:>8.1} ns   {knows_ns:>11.1} ns   {:>9.2} ms   {:>12.2} ms",
            all.as_secs_f64() * 1e3,
            one_by_one.as_secs_f64() * 1e3
        );
    }
}

/// Nanoseconds per call of `lookup`, asked for each of `names` in turn; every call must find it.
fn per_lookup(names: &[String], lookup: impl Fn(&str) -> bool) -> f64 {
    let time = best(|| {
        for i in 0..LOOKUPS {
            assert!(lookup(black_box(&names[i % names.len()])));
        }
    });
    time.as_nanos() as f64 / LOOKUPS as f64
}

/// The shortest of 5 runs of `f`.
fn best(mut f: impl FnMut()) -> Duration {
    (0..5)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .min()
        .unwrap()
}

/// One key for every name: what is measured is finding it.
fn key() -> Arc<CertifiedKey> {
    let pair = rcgen::KeyPair::generate().unwrap();
    let der = rustls::pki_types::PrivateKeyDer::Pkcs8(pair.serialize_der().into());
    let signing = rustls::crypto::aws_lc_rs::sign::any_supported_type(&der).unwrap();
    Arc::new(CertifiedKey::new(vec![], signing))
}

/// A strict-SNI listener whose certificates all come from ACME for `acme_names` (sorted).
fn listener(acme_names: Vec<String>, acme: &Arc<AcmeShared>) -> ListenerTls {
    let certificates = Arc::new(CertificateSet::default());
    let resolver = SniResolver {
        set: certificates.clone(),
        strict: true,
        acme: Some(acme.clone()),
    };
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    ListenerTls {
        config: Arc::new(config),
        certificates,
        strict_sni: true,
        handshake_timeout: Duration::from_secs(10),
        forward_client_cert: None,
        certificate_info: Vec::new(),
        acme_names,
        on_demand: None,
    }
}
