//! Server-side cost of the rustls 0.23 crypto providers: aws-lc-rs versus ring.
//!
//! Everything runs in memory on one thread: a `ClientConnection` and a `ServerConnection`
//! exchange bytes through `Vec<u8>` buffers (`read_tls` / `write_tls` / `process_new_packets`).
//! Only the server's calls are timed, with the per-thread CPU clock
//! (`CLOCK_THREAD_CPUTIME_ID`), so time lost to other processes on a shared machine is not
//! counted. The cost of reading the clock is measured at start and subtracted per timed block.
//!
//! Scenarios (the client offers only X25519, so both providers do the same key exchange):
//! - TLS 1.3 full handshake (TLS13_AES_128_GCM_SHA256, ECDSA P-256 cert, 2 tickets sent)
//! - TLS 1.3 resumed handshake (ticket from the provider's `Ticketer`, PSK_DHE_KE, 2 new tickets)
//! - TLS 1.3 record layer: decrypt a 200-byte request, encrypt a 1 KiB response
//! - TLS 1.2 full handshake (ECDHE-ECDSA-AES128-GCM-SHA256)
//! - TLS 1.2 record layer, as above
//!
//! Usage: `cargo run --release -- [--secs S] [--reps N]` (defaults: 2 s per run, 5 runs).
//! Runs are interleaved A/B (the order flips every repetition); the table shows medians.

use std::error::Error;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::Resumption;
use rustls::crypto::{aws_lc_rs, ring, CryptoProvider, SupportedKxGroup};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::server::ProducesTickets;
use rustls::{
    ClientConfig, ClientConnection, ConnectionCommon, HandshakeKind, NamedGroup, ProtocolVersion, RootCertStore,
    ServerConfig, ServerConnection, SupportedCipherSuite, SupportedProtocolVersion,
};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

const REQUEST_LEN: usize = 200;
const RESPONSE_LEN: usize = 1024;
/// Requests per timed block in the record-layer scenarios.
const BATCH: usize = 256;
const WARMUP: Duration = Duration::from_millis(300);
const SERVER_NAME: &str = "localhost";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Provider {
    AwsLcRs,
    Ring,
}

impl Provider {
    const ALL: [Provider; 2] = [Provider::AwsLcRs, Provider::Ring];

    fn base(self) -> CryptoProvider {
        match self {
            Provider::AwsLcRs => aws_lc_rs::default_provider(),
            Provider::Ring => ring::default_provider(),
        }
    }

    fn x25519(self) -> &'static dyn SupportedKxGroup {
        match self {
            Provider::AwsLcRs => aws_lc_rs::kx_group::X25519,
            Provider::Ring => ring::kx_group::X25519,
        }
    }

    fn suite(self, version: Version) -> SupportedCipherSuite {
        match (self, version) {
            (Provider::AwsLcRs, Version::Tls13) => aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256,
            (Provider::AwsLcRs, Version::Tls12) => aws_lc_rs::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            (Provider::Ring, Version::Tls13) => ring::cipher_suite::TLS13_AES_128_GCM_SHA256,
            (Provider::Ring, Version::Tls12) => ring::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        }
    }

    fn ticketer(self) -> Result<Arc<dyn ProducesTickets>> {
        Ok(match self {
            Provider::AwsLcRs => aws_lc_rs::Ticketer::new()?,
            Provider::Ring => ring::Ticketer::new()?,
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Version {
    Tls12,
    Tls13,
}

impl Version {
    fn rustls(self) -> &'static SupportedProtocolVersion {
        match self {
            Version::Tls12 => &rustls::version::TLS12,
            Version::Tls13 => &rustls::version::TLS13,
        }
    }

    fn wire(self) -> ProtocolVersion {
        match self {
            Version::Tls12 => ProtocolVersion::TLSv1_2,
            Version::Tls13 => ProtocolVersion::TLSv1_3,
        }
    }
}

#[derive(Clone, Copy)]
enum Scenario {
    FullHandshake(Version),
    ResumedHandshake,
    Records(Version),
}

impl Scenario {
    const ALL: [Scenario; 5] = [
        Scenario::FullHandshake(Version::Tls13),
        Scenario::ResumedHandshake,
        Scenario::Records(Version::Tls13),
        Scenario::FullHandshake(Version::Tls12),
        Scenario::Records(Version::Tls12),
    ];

    fn label(self) -> &'static str {
        match self {
            Scenario::FullHandshake(Version::Tls13) => "TLS1.3 full handshake (X25519, ECDSA P-256)",
            Scenario::ResumedHandshake => "TLS1.3 resumed handshake (ticket, PSK_DHE)",
            Scenario::Records(Version::Tls13) => "TLS1.3 AES-128-GCM 200 B in + 1 KiB out",
            Scenario::FullHandshake(Version::Tls12) => "TLS1.2 full handshake (ECDHE-ECDSA)",
            Scenario::Records(Version::Tls12) => "TLS1.2 AES-128-GCM 200 B in + 1 KiB out",
        }
    }

    fn version(self) -> Version {
        match self {
            Scenario::FullHandshake(v) | Scenario::Records(v) => v,
            Scenario::ResumedHandshake => Version::Tls13,
        }
    }

    /// Unit name and nanoseconds per unit.
    fn unit(self) -> (&'static str, f64) {
        match self {
            Scenario::Records(_) => ("ns/req", 1.0),
            _ => ("us/hs", 1000.0),
        }
    }

    fn run(self, bench: &Bench, time: Duration, clock: &Clock) -> Result<Sample> {
        let deadline = Instant::now() + time;
        match self {
            Scenario::FullHandshake(_) => handshakes(bench, deadline, clock, HandshakeKind::Full),
            Scenario::ResumedHandshake => handshakes(bench, deadline, clock, HandshakeKind::Resumed),
            Scenario::Records(_) => records(bench, deadline, clock),
        }
    }
}

/// Thread CPU clock, with the cost of one reading measured so it can be subtracted.
struct Clock {
    overhead_ns: u64,
}

impl Clock {
    fn calibrate() -> Clock {
        const N: u64 = 20_000;
        let start = thread_cpu_ns();
        for _ in 0..N {
            std::hint::black_box(thread_cpu_ns());
        }
        Clock {
            overhead_ns: (thread_cpu_ns() - start) / N,
        }
    }

    fn now(&self) -> u64 {
        thread_cpu_ns()
    }

    fn since(&self, start: u64) -> u64 {
        (thread_cpu_ns() - start).saturating_sub(self.overhead_ns)
    }
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec that outlives the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Server CPU time over a number of operations (handshakes or requests).
#[derive(Default)]
struct Sample {
    ns: u64,
    ops: u64,
}

impl Sample {
    fn per_op(&self) -> f64 {
        self.ns as f64 / self.ops.max(1) as f64
    }
}

struct Identity {
    cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
}

impl Identity {
    /// Self-signed ECDSA P-256 certificate for `SERVER_NAME`.
    fn generate() -> Result<Identity> {
        let rcgen::CertifiedKey { cert, key_pair } = rcgen::generate_simple_self_signed(vec![SERVER_NAME.into()])?;
        Ok(Identity {
            cert: cert.der().clone(),
            key: PrivatePkcs8KeyDer::from(key_pair.serialize_der()),
        })
    }
}

/// Client and server configurations for one provider and one scenario.
struct Bench {
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
}

impl Bench {
    fn new(provider: Provider, scenario: Scenario, id: &Identity, clock: &Clock) -> Result<Bench> {
        let version = scenario.version();
        let suite = provider.suite(version);

        let client_provider = CryptoProvider {
            cipher_suites: vec![suite],
            kx_groups: vec![provider.x25519()],
            ..provider.base()
        };
        let mut roots = RootCertStore::empty();
        roots.add(id.cert.clone())?;
        let mut client = ClientConfig::builder_with_provider(Arc::new(client_provider))
            .with_protocol_versions(&[version.rustls()])?
            .with_root_certificates(roots)
            .with_no_client_auth();
        // The client still offers PSK_DHE_KE when resumption is disabled, so the TLS 1.3
        // server sends its tickets in the full-handshake scenario too.
        client.resumption = match scenario {
            Scenario::ResumedHandshake => Resumption::in_memory_sessions(256),
            _ => Resumption::disabled(),
        };

        // The server keeps the provider's default key-exchange groups; the client offers X25519 only.
        let server_provider = CryptoProvider {
            cipher_suites: vec![suite],
            ..provider.base()
        };
        let mut server = ServerConfig::builder_with_provider(Arc::new(server_provider))
            .with_protocol_versions(&[version.rustls()])?
            .with_no_client_auth()
            .with_single_cert(vec![id.cert.clone()], PrivateKeyDer::Pkcs8(id.key.clone_key()))?;
        server.ticketer = provider.ticketer()?;

        let bench = Bench {
            client: Arc::new(client),
            server: Arc::new(server),
        };
        // Check what is negotiated (and give the resumption scenario its first tickets).
        let hs = handshake(&bench, &mut Buffers::default(), clock)?;
        check(hs.server.negotiated_cipher_suite() == Some(suite), "cipher suite")?;
        check(hs.server.protocol_version() == Some(version.wire()), "protocol version")?;
        check(
            hs.server.negotiated_key_exchange_group().map(|g| g.name()) == Some(NamedGroup::X25519),
            "key exchange group",
        )?;
        check(
            hs.server.handshake_kind() == Some(HandshakeKind::Full),
            "first handshake is full",
        )?;
        Ok(bench)
    }
}

fn check(ok: bool, what: &str) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(format!("unexpected {what}").into())
    }
}

#[derive(Default)]
struct Buffers {
    c2s: Vec<u8>,
    s2c: Vec<u8>,
    scratch: Vec<u8>,
}

/// Hands `data` to `conn`, processes it and drains any plaintext; returns the plaintext length.
fn feed<D>(conn: &mut ConnectionCommon<D>, mut data: &[u8], scratch: &mut Vec<u8>) -> Result<usize> {
    scratch.resize(16 * 1024, 0);
    let mut plaintext = 0;
    while !data.is_empty() {
        conn.read_tls(&mut data)?;
        conn.process_new_packets()?;
        loop {
            match conn.reader().read(scratch) {
                Ok(0) => break,
                Ok(n) => plaintext += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(plaintext)
}

/// Appends everything `conn` has to send to `out`.
fn flush<D>(conn: &mut ConnectionCommon<D>, out: &mut Vec<u8>) -> Result<()> {
    while conn.wants_write() {
        conn.write_tls(out)?;
    }
    Ok(())
}

struct Handshake {
    server_ns: u64,
    client: ClientConnection,
    server: ServerConnection,
}

/// One complete handshake (including the server's tickets); only server calls are timed.
fn handshake(bench: &Bench, bufs: &mut Buffers, clock: &Clock) -> Result<Handshake> {
    let mut client = ClientConnection::new(bench.client.clone(), ServerName::try_from(SERVER_NAME)?)?;
    let t = clock.now();
    let mut server = ServerConnection::new(bench.server.clone())?;
    let mut server_ns = clock.since(t);
    loop {
        bufs.c2s.clear();
        flush(&mut client, &mut bufs.c2s)?;
        if bufs.c2s.is_empty() && !server.wants_write() {
            check(!client.is_handshaking() && !server.is_handshaking(), "handshake stall")?;
            return Ok(Handshake {
                server_ns,
                client,
                server,
            });
        }
        let t = clock.now();
        feed(&mut server, &bufs.c2s, &mut bufs.scratch)?;
        bufs.s2c.clear();
        flush(&mut server, &mut bufs.s2c)?;
        server_ns += clock.since(t);
        feed(&mut client, &bufs.s2c, &mut bufs.scratch)?;
    }
}

fn handshakes(bench: &Bench, deadline: Instant, clock: &Clock, kind: HandshakeKind) -> Result<Sample> {
    let mut bufs = Buffers::default();
    let mut sample = Sample::default();
    while Instant::now() < deadline {
        let hs = handshake(bench, &mut bufs, clock)?;
        check(hs.server.handshake_kind() == Some(kind), "handshake kind")?;
        sample.ns += hs.server_ns;
        sample.ops += 1;
    }
    Ok(sample)
}

/// Request/response over one established connection: the server decrypts a 200-byte request
/// and encrypts a 1 KiB response. Requests are encrypted by the client ahead of each timed
/// batch; responses are decrypted and counted by the client after it.
fn records(bench: &Bench, deadline: Instant, clock: &Clock) -> Result<Sample> {
    let mut bufs = Buffers::default();
    let Handshake {
        mut client, mut server, ..
    } = handshake(bench, &mut bufs, clock)?;
    let request = [b'q'; REQUEST_LEN];
    let response = [b'r'; RESPONSE_LEN];
    let mut received = [0u8; REQUEST_LEN];
    let mut requests = Vec::new();
    let mut ends = Vec::with_capacity(BATCH);
    let mut responses = Vec::new();
    let mut sample = Sample::default();
    while Instant::now() < deadline {
        requests.clear();
        ends.clear();
        for _ in 0..BATCH {
            client.writer().write_all(&request)?;
            flush(&mut client, &mut requests)?;
            ends.push(requests.len());
        }
        responses.clear();

        let t = clock.now();
        let mut start = 0;
        for &end in &ends {
            let mut wire = &requests[start..end];
            while !wire.is_empty() {
                server.read_tls(&mut wire)?;
                server.process_new_packets()?;
            }
            server.reader().read_exact(&mut received)?;
            server.writer().write_all(&response)?;
            flush(&mut server, &mut responses)?;
            start = end;
        }
        sample.ns += clock.since(t);
        sample.ops += BATCH as u64;

        check(received == request, "request contents")?;
        let got = feed(&mut client, &responses, &mut bufs.scratch)?;
        check(got == BATCH * RESPONSE_LEN, "response length")?;
    }
    Ok(sample)
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

struct Options {
    secs: f64,
    reps: usize,
}

fn parse_args() -> Result<Options> {
    let mut opts = Options { secs: 2.0, reps: 5 };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--secs" => opts.secs = value()?.parse()?,
            "--reps" => opts.reps = value()?.parse()?,
            "-h" | "--help" => {
                println!("usage: tls-providers [--secs S] [--reps N]");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {arg}").into()),
        }
    }
    check(opts.secs > 0.0 && opts.reps > 0, "--secs/--reps must be positive")?;
    Ok(opts)
}

fn main() -> Result<()> {
    let opts = parse_args()?;
    let clock = Clock::calibrate();
    let id = Identity::generate()?;
    let time = Duration::from_secs_f64(opts.secs);

    println!("CPU: {}", cpu_model());
    println!(
        "runs: {} x {:.1} s per scenario and provider, interleaved; server thread CPU time; clock overhead {} ns",
        opts.reps, opts.secs, clock.overhead_ns
    );

    let mut benches = Vec::new();
    for scenario in Scenario::ALL {
        let mut pair = Vec::new();
        for provider in Provider::ALL {
            let bench = Bench::new(provider, scenario, &id, &clock)?;
            scenario.run(&bench, WARMUP, &clock)?;
            pair.push(bench);
        }
        benches.push(pair);
    }

    // results[scenario][provider] = per-op ns of each repetition
    let mut results = vec![vec![Vec::new(); Provider::ALL.len()]; Scenario::ALL.len()];
    for rep in 0..opts.reps {
        for (s, scenario) in Scenario::ALL.into_iter().enumerate() {
            let order: [usize; 2] = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
            for p in order {
                let sample = scenario.run(&benches[s][p], time, &clock)?;
                results[s][p].push(sample.per_op());
            }
        }
        eprintln!("repetition {}/{} done", rep + 1, opts.reps);
    }

    println!();
    println!(
        "{:<46} {:>7} {:>10} {:>10} {:>8}  faster",
        "scenario (server side, median)", "unit", "aws-lc-rs", "ring", "ratio"
    );
    for (s, scenario) in Scenario::ALL.into_iter().enumerate() {
        let (unit, scale) = scenario.unit();
        let aws = median(&results[s][0]) / scale;
        let ring = median(&results[s][1]) / scale;
        let faster = if aws < ring { "aws-lc-rs" } else { "ring" };
        println!(
            "{:<46} {:>7} {:>10.2} {:>10.2} {:>8.3}  {faster}",
            scenario.label(),
            unit,
            aws,
            ring,
            ring / aws
        );
    }
    println!("ratio = ring / aws-lc-rs (> 1: aws-lc-rs is faster)");

    println!();
    println!("all runs (per-op, same units):");
    for (s, scenario) in Scenario::ALL.into_iter().enumerate() {
        let (_, scale) = scenario.unit();
        for (p, name) in ["aws-lc-rs", "ring"].into_iter().enumerate() {
            let runs: Vec<String> = results[s][p].iter().map(|v| format!("{:.2}", v / scale)).collect();
            println!("  {:<46} {:<9} {}", scenario.label(), name, runs.join(" "));
        }
    }
    Ok(())
}
