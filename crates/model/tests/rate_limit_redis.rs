//! The GCRA batch-take script (`GCRA_TAKE_SCRIPT`) against a real `redis-server`, spoken to over
//! a plain `TcpStream` with Rampart's own RESP codec. Each test starts its own server on a free
//! 127.0.0.1 port (no persistence, files in a temporary directory) and stops it when it ends,
//! passed or failed. `scripts/servers` installs `redis-server` (Debian's package) when it is
//! missing; a test fails, never skips, when it cannot be started.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use rampart_model::filter::rate_limit::{RateLimit, GCRA_TAKE_SCRIPT};
use rampart_proto::resp::{encode_array_header, encode_bulk, encode_bulk_int, encode_command, parse_reply};
use rampart_proto::resp::{Reply, RespLimits};

/// How long the server may take to answer its first PING, and any reply to arrive.
const WAIT: Duration = Duration::from_secs(10);

/// An hour in microseconds: an interval so long that no token comes back during a test.
const HOUR_US: i64 = 3_600_000_000;

// ---------------------------------------------------------------------------------------------
// A server and a client

/// A `redis-server` child process, killed when dropped.
struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

/// Runs `scripts/servers` once per test binary (it installs what is missing, idempotently).
fn install_servers() {
    static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    INSTALLED.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/servers");
        // Its messages go to a file, read when it fails; the wait is bounded (an install that
        // hangs fails the test instead of the suite).
        let log = std::env::temp_dir().join(format!("rampart-servers-{}.log", std::process::id()));
        let mut child = Command::new(script)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
        let deadline = Instant::now() + Duration::from_secs(1200);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                panic!("scripts/servers did not finish within 20 minutes");
            }
            thread::sleep(Duration::from_millis(50));
        };
        let messages = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        assert!(status.success(), "scripts/servers failed ({status}): {messages}");
    });
}

impl RedisServer {
    fn start() -> RedisServer {
        install_servers();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = std::env::temp_dir().join(format!("rampart-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(dir.join("redis.log")).unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start redis-server ({e}); this test needs it: run scripts/servers to install it")
            });
        RedisServer { child, port, dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// A connection, once the server answers PING (retried every 10 ms up to [`WAIT`]).
    fn connect(&mut self) -> Client {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("redis-server exited ({status}) before answering PING:\n{}", self.log());
            }
            if let Ok(stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                let mut client = Client::new(stream);
                if client.call(&[b"PING"]) == Value::Simple("PONG".into()) {
                    return client;
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server not answering PING within {WAIT:?}:\n{}",
                self.log()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A reply owned by the test (a [`Reply`] borrows the read buffer).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Value>>),
}

impl Value {
    fn of(reply: &Reply<'_>) -> Value {
        match reply {
            Reply::Simple(s) => Value::Simple(String::from_utf8_lossy(s).into()),
            Reply::Error(e) => Value::Error(String::from_utf8_lossy(e).into()),
            Reply::Integer(n) => Value::Integer(*n),
            Reply::Bulk(b) => Value::Bulk(b.map(<[u8]>::to_vec)),
            Reply::Array(a) => Value::Array(a.as_ref().map(|items| items.iter().map(Value::of).collect())),
        }
    }

    fn integer(&self) -> i64 {
        match self {
            Value::Integer(n) => *n,
            other => panic!("not an integer: {other:?}"),
        }
    }
}

struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn new(stream: TcpStream) -> Client {
        stream.set_read_timeout(Some(WAIT)).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    /// Sends one command and reads its reply.
    fn call(&mut self, args: &[&[u8]]) -> Value {
        let mut out = Vec::new();
        encode_command(&mut out, args);
        self.stream.write_all(&out).unwrap();
        self.read_reply()
    }

    fn read_reply(&mut self) -> Value {
        loop {
            if let Some((reply, used)) = parse_reply(&self.buf, &RespLimits::default()).unwrap() {
                let value = Value::of(&reply);
                self.buf.drain(..used);
                return value;
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).expect("a reply from redis-server");
            assert!(n > 0, "redis-server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn load_script(&mut self) -> Vec<u8> {
        match self.call(&[b"SCRIPT", b"LOAD", GCRA_TAKE_SCRIPT.as_bytes()]) {
            Value::Bulk(Some(sha)) => {
                assert_eq!(sha.len(), 40, "{sha:?}");
                sha
            }
            other => panic!("SCRIPT LOAD answered {other:?}"),
        }
    }

    /// `EVALSHA sha 1 key interval_us tolerance_us wanted` for each take, written at once
    /// (pipelined), then every reply read.
    fn takes(&mut self, sha: &[u8], takes: &[(&str, i64, i64, i64)]) -> Vec<Value> {
        let mut out = Vec::new();
        for &(key, interval_us, tolerance_us, wanted) in takes {
            encode_array_header(&mut out, 7);
            encode_bulk(&mut out, b"EVALSHA");
            encode_bulk(&mut out, sha);
            encode_bulk_int(&mut out, 1);
            encode_bulk(&mut out, key.as_bytes());
            encode_bulk_int(&mut out, interval_us);
            encode_bulk_int(&mut out, tolerance_us);
            encode_bulk_int(&mut out, wanted);
        }
        self.stream.write_all(&out).unwrap();
        takes.iter().map(|_| self.read_reply()).collect()
    }

    /// One take: `[granted, retry_after_us, reset_after_us, remaining]`.
    fn take(&mut self, sha: &[u8], key: &str, interval_us: i64, tolerance_us: i64, wanted: i64) -> [i64; 4] {
        let reply = self.takes(sha, &[(key, interval_us, tolerance_us, wanted)]).remove(0);
        match reply {
            Value::Array(Some(items)) if items.len() == 4 => [
                items[0].integer(),
                items[1].integer(),
                items[2].integer(),
                items[3].integer(),
            ],
            other => panic!("the script answered {other:?}"),
        }
    }

    fn integer(&mut self, args: &[&[u8]]) -> i64 {
        self.call(args).integer()
    }

    /// Redis's clock in microseconds.
    fn now_us(&mut self) -> i64 {
        match self.call(&[b"TIME"]) {
            Value::Array(Some(t)) => {
                let field = |v: &Value| match v {
                    Value::Bulk(Some(b)) => std::str::from_utf8(b).unwrap().parse::<i64>().unwrap(),
                    other => panic!("TIME field {other:?}"),
                };
                field(&t[0]) * 1_000_000 + field(&t[1])
            }
            other => panic!("TIME answered {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn a_burst_is_granted_then_denied_with_a_retry_after_and_an_expiry() {
    let mut redis = RedisServer::start();
    let mut c = redis.connect();
    let sha = c.load_script();
    let (interval, burst) = (HOUR_US, 5);
    for left in (0..burst).rev() {
        let [granted, retry_after, reset_after, remaining] = c.take(&sha, "burst", interval, burst * interval, 1);
        assert_eq!((granted, remaining), (1, left));
        // No token comes back within the test: each take adds one interval, less what elapsed.
        let spent = (burst - left) * interval;
        assert!(
            reset_after <= spent && reset_after > spent - 60_000_000,
            "{reset_after}"
        );
        if left > 0 {
            assert_eq!(retry_after, 0);
        }
    }
    let [granted, retry_after, reset_after, remaining] = c.take(&sha, "burst", interval, burst * interval, 1);
    assert_eq!((granted, remaining), (0, 0));
    assert!(
        retry_after > interval - 60_000_000 && retry_after <= interval,
        "{retry_after}"
    );
    assert!(reset_after > burst * interval - 60_000_000 && reset_after <= burst * interval);
    // The key expires when the bucket is full again: the TTL is the reset rounded up to a ms plus
    // one, on Redis's millisecond clock for expiries, which may stand a millisecond apart from the
    // script's TIME.
    let pttl = c.integer(&[b"PTTL", b"burst"]);
    let reset_ms = (reset_after + 999) / 1000;
    assert!(
        pttl <= reset_ms + 3 && pttl > reset_ms - 60_000,
        "PTTL {pttl}, reset {reset_ms} ms"
    );
    // The stored TAT is Redis's now plus the reset, in microseconds.
    let tat = match c.call(&[b"GET", b"burst"]) {
        Value::Bulk(Some(b)) => std::str::from_utf8(&b).unwrap().parse::<i64>().unwrap(),
        other => panic!("GET answered {other:?}"),
    };
    let now = c.now_us();
    assert!((tat - now - reset_after).abs() < 60_000_000, "TAT {tat}, now {now}");
}

/// Panics unless `actual` is `expected` less at most a minute of Redis's clock elapsing.
fn assert_about(actual: i64, expected: i64, what: &str) {
    assert!(
        actual <= expected && actual > expected - 60_000_000,
        "{what}: {actual} µs, expected just under {expected}"
    );
}

#[test]
fn up_to_n_grants_what_the_bucket_holds() {
    let mut redis = RedisServer::start();
    let mut c = redis.connect();
    let sha = c.load_script();
    let tolerance = 10 * HOUR_US;
    let [granted, retry_after, reset_after, remaining] = c.take(&sha, "lease", HOUR_US, tolerance, 4);
    assert_eq!((granted, retry_after, remaining), (4, 0, 6));
    assert_about(reset_after, 4 * HOUR_US, "reset after 4");
    let [granted, _, _, remaining] = c.take(&sha, "lease", HOUR_US, tolerance, 4);
    assert_eq!((granted, remaining), (4, 2));
    // Two left: a partial grant, and the next token an interval away.
    let [granted, retry_after, reset_after, remaining] = c.take(&sha, "lease", HOUR_US, tolerance, 4);
    assert_eq!((granted, remaining), (2, 0));
    assert_about(retry_after, HOUR_US, "retry after the last token");
    assert_about(reset_after, tolerance, "reset when empty");
    let [granted, _, _, remaining] = c.take(&sha, "lease", HOUR_US, tolerance, 4);
    assert_eq!((granted, remaining), (0, 0));
    // A lease larger than the bucket gets the bucket.
    let [granted, _, _, remaining] = c.take(&sha, "big", HOUR_US, tolerance, 1_000_000);
    assert_eq!((granted, remaining), (10, 0));
}

#[test]
fn a_partly_refilled_bucket_grants_what_came_back() {
    let mut redis = RedisServer::start();
    let mut c = redis.connect();
    let sha = c.load_script();
    // A bucket of 5 an hour apart, its TAT 2.5 hours ahead: 2 whole tokens are in it (and stay 2
    // for the next half hour), a third is half an hour away.
    let tat = c.now_us() + 5 * HOUR_US / 2;
    let value = tat.to_string();
    assert_eq!(c.call(&[b"SET", b"half", value.as_bytes()]), Value::Simple("OK".into()));
    let [granted, retry_after, _, remaining] = c.take(&sha, "half", HOUR_US, 5 * HOUR_US, 3);
    assert_eq!((granted, remaining), (2, 0));
    assert_about(retry_after, HOUR_US / 2, "retry after half a token");
    // Something that is not a TAT counts as a full bucket (and is replaced).
    c.call(&[b"SET", b"junk", b"not a number"]);
    assert_eq!(c.take(&sha, "junk", HOUR_US, 5 * HOUR_US, 9)[0], 5);
}

#[test]
fn idle_keys_expire_and_nothing_is_written_for_nothing() {
    let mut redis = RedisServer::start();
    let mut c = redis.connect();
    let sha = c.load_script();
    // Wanting nothing from an absent key leaves it absent.
    assert_eq!(c.take(&sha, "none", HOUR_US, HOUR_US, 0), [0, 0, 0, 1]);
    assert_eq!(c.integer(&[b"EXISTS", b"none"]), 0);
    // A denied take leaves the expiry as the last grant set it.
    c.take(&sha, "ttl", HOUR_US, HOUR_US, 1);
    let before = c.integer(&[b"PTTL", b"ttl"]);
    assert_eq!(c.take(&sha, "ttl", HOUR_US, HOUR_US, 1)[0], 0);
    let after = c.integer(&[b"PTTL", b"ttl"]);
    assert!(after <= before && after > before - 60_000, "{before} then {after}");
    // A bucket refilled within 200 ms: its key is gone once it is full again, which a client
    // sees by polling (a bounded wait for an expiry that the script set).
    assert_eq!(c.take(&sha, "short", 100_000, 200_000, 2)[0], 2);
    let pttl = c.integer(&[b"PTTL", b"short"]);
    // -2: expired already (a slow machine); -1 (no expiry) or more than 201 ms is wrong.
    assert!((1..=201).contains(&pttl) || pttl == -2, "PTTL {pttl}");
    let deadline = Instant::now() + WAIT;
    while c.integer(&[b"EXISTS", b"short"]) == 1 {
        assert!(Instant::now() < deadline, "the key never expired");
        thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(c.take(&sha, "short", 100_000, 200_000, 5)[0], 2);
}

#[test]
fn concurrent_clients_never_get_more_than_the_bucket_holds() {
    const CLIENTS: usize = 2;
    const BURST: i64 = 100;
    let mut redis = RedisServer::start();
    let sha = redis.connect().load_script();
    let start = Arc::new(Barrier::new(CLIENTS));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (mut c, sha, start) = (redis.connect(), sha.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                let mut granted = 0;
                // Batches of four pipelined takes of up to 3 (1 + i) tokens, until all are denied.
                loop {
                    let wanted = 1 + i as i64 * 2;
                    let batch = [("shared", HOUR_US, BURST * HOUR_US, wanted); 4];
                    let replies = c.takes(&sha, &batch);
                    let mut got = 0;
                    for reply in replies {
                        let Value::Array(Some(items)) = reply else {
                            panic!("the script answered {reply:?}")
                        };
                        let g = items[0].integer();
                        assert!((0..=wanted).contains(&g));
                        got += g;
                    }
                    granted += got;
                    // Done when all are denied; past the burst, the assertion below fails.
                    if got == 0 || granted > BURST {
                        return granted;
                    }
                }
            })
        })
        .collect();
    let each: Vec<i64> = clients.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(each.iter().sum::<i64>(), BURST, "granted per client: {each:?}");
}

#[test]
fn rate_limit_settings_drive_the_script() {
    let mut redis = RedisServer::start();
    let mut c = redis.connect();
    let sha = c.load_script();
    let limit = RateLimit::new(100, Duration::from_secs(60), 7).unwrap();
    let args = limit.redis_args().unwrap();
    let (interval, tolerance) = (args.interval_us as i64, args.tolerance_us as i64);
    assert_eq!((interval, tolerance), (600_000, 4_200_000));
    let [granted, _, reset_after, remaining] = c.take(&sha, "settings", interval, tolerance, 10);
    assert_eq!((granted, remaining), (7, 0));
    assert_about(reset_after, tolerance, "reset");
}

#[test]
fn bad_arguments_and_unknown_scripts_are_errors() {
    let mut redis = RedisServer::start();
    let mut c = redis.connect();
    // Before SCRIPT LOAD (as after a Redis restart) EVALSHA answers NOSCRIPT: load and retry.
    let sha = "0123456789abcdef0123456789abcdef01234567";
    match c.takes(sha.as_bytes(), &[("k", 1, 1, 1)]).remove(0) {
        Value::Error(e) => assert!(e.starts_with("NOSCRIPT"), "{e}"),
        other => panic!("EVALSHA of an unknown script answered {other:?}"),
    }
    let sha = c.load_script();
    for (interval, tolerance, wanted) in [(0, 10, 1), (10, 9, 1), (10, 100, -1), (10, 1 << 53, 1)] {
        match c.takes(&sha, &[("k", interval, tolerance, wanted)]).remove(0) {
            Value::Error(e) => assert!(e.contains("rampart gcra"), "{e}"),
            other => panic!("({interval}, {tolerance}, {wanted}) answered {other:?}"),
        }
    }
    let mut out = Vec::new();
    encode_command(&mut out, &[b"EVALSHA", &sha, b"1", b"k", b"1.5", b"10", b"1"]);
    c.stream.write_all(&out).unwrap();
    assert!(matches!(c.read_reply(), Value::Error(e) if e.contains("rampart gcra")));
    assert_eq!(c.integer(&[b"EXISTS", b"k"]), 0);
}
