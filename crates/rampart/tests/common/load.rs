//! Load for end-to-end tests: clients paced by the clock (as a load generator is), and a
//! steady stream of keep-alive requests through several proxies that records what answered.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::http::{header, read_response, HttpBackend, Reply};
use super::{connect, WAIT};

/// Reads one response (head and `Content-Length` body) off a keep-alive connection: status and
/// head.
pub fn exchange(stream: &mut TcpStream, request: &[u8]) -> (u16, String) {
    stream.write_all(request).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let len: usize = header(&head, "content-length").map_or(0, |v| v.parse().unwrap());
            while buf.len() < end + 4 + len {
                let n = stream.read(&mut chunk).unwrap();
                assert!(n > 0, "closed mid-body");
                buf.extend_from_slice(&chunk[..n]);
            }
            let status = head[9..12].parse().unwrap();
            return (status, head);
        }
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "closed before a response: {}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// What a paced run saw.
#[derive(Debug, Default)]
pub struct Tally {
    pub allowed: u64,
    pub refused: u64,
    pub other: u64,
    /// From the first request sent to the last answered.
    pub elapsed: Duration,
    /// The slowest answer.
    pub slowest: Duration,
}

/// `clients` keep-alive connections, one to each of `ports` in turn, together sending `rate`
/// requests a second for `duration`, each at its scheduled instant.
pub fn paced(ports: &[u16], clients: usize, rate: u64, duration: Duration, request: &str) -> Tally {
    let counts: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
    let slowest = Arc::new(AtomicU64::new(0));
    let interval = Duration::from_nanos(1_000_000_000 * clients as u64 / rate);
    let per_client = (duration.as_nanos() / interval.as_nanos()) as u64;
    let start = Instant::now() + Duration::from_millis(50);
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let (counts, slowest) = (counts.clone(), slowest.clone());
            let port = ports[c % ports.len()];
            let request = request.to_string();
            thread::spawn(move || {
                let mut stream = connect(port);
                // Clients start spread over one interval, so the load is even.
                let offset = interval * c as u32 / clients as u32;
                for i in 0..per_client {
                    let at = start + offset + interval * i as u32;
                    if let Some(wait) = at.checked_duration_since(Instant::now()) {
                        thread::sleep(wait);
                    }
                    let sent = Instant::now();
                    let (status, _) = exchange(&mut stream, request.as_bytes());
                    slowest.fetch_max(sent.elapsed().as_micros() as u64, Ordering::Relaxed);
                    let slot = match status {
                        200 => 0,
                        429 => 1,
                        _ => 2,
                    };
                    counts[slot].fetch_add(1, Ordering::Relaxed);
                }
                counts[3].fetch_max(start.elapsed().as_micros() as u64, Ordering::Relaxed);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    Tally {
        allowed: counts[0].load(Ordering::Relaxed),
        refused: counts[1].load(Ordering::Relaxed),
        other: counts[2].load(Ordering::Relaxed),
        elapsed: Duration::from_micros(counts[3].load(Ordering::Relaxed)),
        slowest: Duration::from_micros(slowest.load(Ordering::Relaxed)),
    }
}

/// What a bucket of `burst` refilled at `rate` a second allows over `elapsed`: the check the
/// issue asks for, within 5%.
pub fn assert_within_5_percent(t: &Tally, rate: f64, burst: f64) {
    let expected = burst + rate * t.elapsed.as_secs_f64();
    let allowed = t.allowed as f64;
    eprintln!("allowed {allowed}, expected {expected:.1}: {t:?}");
    assert!(
        (allowed - expected).abs() <= 0.05 * expected,
        "allowed {allowed}, expected {expected:.1} (±5%): {t:?}"
    );
    assert_eq!(t.other, 0, "{t:?}");
    // Nobody is held waiting: a refusal is immediate, a take at most one Redis round trip.
    assert!(t.slowest < Duration::from_secs(1), "{t:?}");
}

/// Backends on 127.0.0.2 and 127.0.0.3 at one port (an A record gives an address, the target
/// its port), each answering with its own name.
pub fn two_backends() -> (u16, HttpBackend, HttpBackend) {
    loop {
        // The sockets probed are the ones served: no moment in which another test could take
        // the port.
        let a = TcpListener::bind("127.0.0.2:0").unwrap();
        let port = a.local_addr().unwrap().port();
        let Ok(b) = TcpListener::bind(("127.0.0.3", port)) else {
            continue;
        };
        return (
            port,
            HttpBackend::serve_on(a, Reply::Raw(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nA")),
            HttpBackend::serve_on(b, Reply::Raw(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nB")),
        );
    }
}

/// Requests sent one after another over a keep-alive connection to each of several proxies
/// until stopped: what answered each (the body of a 200, else `status N`).
pub struct Load {
    stop: Arc<AtomicBool>,
    answers: Receiver<String>,
    seen: Vec<String>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Load {
    /// One client per port in `ports`.
    pub fn start(ports: &[u16]) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let (out, answers) = channel();
        let threads = ports
            .iter()
            .map(|&port| {
                let (s, out) = (stop.clone(), out.clone());
                thread::spawn(move || {
                    let mut conn: Option<TcpStream> = None;
                    while !s.load(Ordering::Relaxed) {
                        let stream = conn.get_or_insert_with(|| TcpStream::connect(("127.0.0.1", port)).unwrap());
                        stream.set_read_timeout(Some(WAIT)).unwrap();
                        let outcome = match stream.write_all(b"GET / HTTP/1.1\r\nHost: app\r\n\r\n") {
                            Ok(()) => {
                                let (status, head, body) = read_response(stream);
                                if head.to_ascii_lowercase().contains("connection: close") {
                                    conn = None;
                                }
                                if status == 200 {
                                    String::from_utf8_lossy(&body).into_owned()
                                } else {
                                    format!("status {status}")
                                }
                            }
                            Err(e) => format!("write failed: {e}"),
                        };
                        if out.send(outcome).is_err() {
                            return;
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            answers,
            seen: Vec::new(),
            threads,
        }
    }

    pub fn count(&mut self) -> usize {
        self.seen.extend(self.answers.try_iter());
        self.seen.len()
    }

    /// Waits until `ok` holds for the answers since answer `from`; how long that took.
    pub fn wait_until(&mut self, from: usize, what: &str, ok: impl Fn(&[String]) -> bool) -> Duration {
        let started = Instant::now();
        loop {
            self.count();
            if ok(&self.seen[from..]) {
                return started.elapsed();
            }
            assert!(started.elapsed() < WAIT, "{what}: not within {WAIT:?}");
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Every answer, once stopped.
    pub fn finish(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
        self.count();
        std::mem::take(&mut self.seen)
    }
}
