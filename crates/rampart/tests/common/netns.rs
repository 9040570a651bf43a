//! A lossy network path for the tests: [`LossyNetns`], a network namespace joined to this one by a
//! veth pair that drops a share of the packets each way, to run a client (or a server) through.
//! Needs root, `ip`, `tc` and `nft` (scripts/quic-clients installs iproute2 and nftables).

use std::ffi::OsStr;
use std::io::Read;
use std::net::Ipv4Addr;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::h3::CLIENT_WAIT;

/// A network namespace joined to this one by a veth pair (`host_addr` here, `ns_addr` in it, a
/// /30 in 10.128.0.0/9 chosen from the process id), dropping `loss_percent` of the packets in each
/// direction: with netem (`tc qdisc ... netem loss P%` on both ends) where the kernel has it,
/// else with an nftables rule on the ingress of each end (a `netdev` table: random drops of
/// arriving packets, so no sender sees an error). A server that a client in the namespace must
/// reach binds `host_addr` (or 0.0.0.0), not 127.0.0.1, which is another loopback in there.
/// Everything is removed when dropped. Needs root.
pub struct LossyNetns {
    pub name: String,
    pub host_addr: Ipv4Addr,
    pub ns_addr: Ipv4Addr,
    host_if: String,
    /// "netem" or "nftables".
    pub method: &'static str,
}

impl LossyNetns {
    pub fn new(loss_percent: f64) -> Result<LossyNetns, String> {
        super::h3::clients(); // scripts/quic-clients also installs ip, tc and nft
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let slot = (pid % 32768) * 64 + n % 64;
        let base = u32::from(Ipv4Addr::new(10, 128, 0, 0)) + slot * 4;
        let mut ns = LossyNetns {
            name: format!("rampart-lossy-{pid}-{n}"),
            host_addr: Ipv4Addr::from(base + 1),
            ns_addr: Ipv4Addr::from(base + 2),
            host_if: format!("rq{pid}x{n}h"),
            method: "netem",
        };
        let ns_if = format!("rq{pid}x{n}n");
        let (name, host_if) = (ns.name.clone(), ns.host_if.clone());
        let (host_cidr, ns_cidr) = (format!("{}/30", ns.host_addr), format!("{}/30", ns.ns_addr));
        let loss = format!("{loss_percent}%");
        let steps: [(bool, &[&str]); 9] = [
            (false, &["ip", "netns", "add", &name]),
            (
                false,
                &["ip", "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if],
            ),
            (false, &["ip", "link", "set", &ns_if, "netns", &name]),
            (false, &["ip", "addr", "add", &host_cidr, "dev", &host_if]),
            (false, &["ip", "link", "set", &host_if, "up"]),
            (true, &["ip", "addr", "add", &ns_cidr, "dev", &ns_if]),
            (true, &["ip", "link", "set", &ns_if, "up"]),
            (true, &["ip", "link", "set", "lo", "up"]),
            (
                false,
                &["tc", "qdisc", "add", "dev", &host_if, "root", "netem", "loss", &loss],
            ),
        ];
        for (i, (inside, step)) in steps.iter().enumerate() {
            match (ns.sh(*inside, step), i) {
                (Ok(()), _) => {}
                // No netem in this kernel ("Specified qdisc kind is unknown"): nftables instead.
                (Err(e), 8) if e.contains("unknown") => ns.method = "nftables",
                (Err(e), _) => return Err(e), // Drop removes what was made
            }
        }
        if ns.method == "netem" {
            ns.sh(
                true,
                &["tc", "qdisc", "add", "dev", &ns_if, "root", "netem", "loss", &loss],
            )?;
        } else {
            // numgen random mod 1000000 < P*10000: P% of the IP packets arriving at each end (ARP
            // is left alone: a lost ARP request would stall the path for a second).
            let cut = (loss_percent * 10_000.0).round() as u64;
            let table = |dev: &str| {
                format!(
                    "{{ chain lossy {{ type filter hook ingress device \"{dev}\" priority 0; policy accept; \
                     meta protocol {{ ip, ip6 }} numgen random mod 1000000 < {cut} drop; }}; }}"
                )
            };
            let table_name = ns.nft_table();
            ns.sh(false, &["nft", "add", "table", "netdev", &table_name, &table(&host_if)])?;
            ns.sh(true, &["nft", "add", "table", "netdev", &table_name, &table(&ns_if)])?;
        }
        Ok(ns)
    }

    /// [`sh`] here, or inside the namespace.
    fn sh(&self, inside: bool, argv: &[&str]) -> Result<(), String> {
        if !inside {
            return sh(argv);
        }
        let mut all = vec!["ip", "netns", "exec", &self.name];
        all.extend_from_slice(argv);
        sh(&all)
    }

    fn nft_table(&self) -> String {
        self.name.replace('-', "_")
    }

    /// `program` run inside the namespace (`ip netns exec NAME program`); add its arguments.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Runs `args` inside the namespace to completion, bounded by [`CLIENT_WAIT`].
    pub fn output(&self, args: &[&str]) -> Result<Output, String> {
        let (program, rest) = args.split_first().ok_or("no command")?;
        let mut cmd = self.command(program);
        cmd.args(rest);
        run_bounded(cmd, CLIENT_WAIT)
    }
}

impl Drop for LossyNetns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its veth end, and with it the pair; the rest is for
        // a namespace half made.
        let _ = sh(&["ip", "netns", "del", &self.name]);
        let _ = sh(&["ip", "link", "del", &self.host_if]);
        if self.method == "nftables" {
            let _ = sh(&["nft", "delete", "table", "netdev", &self.nft_table()]);
        }
    }
}

/// Runs `argv` (a system tool: ip, tc, nft) with a bound; Err with its output when it fails.
fn sh(argv: &[&str]) -> Result<(), String> {
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..]);
    let out = run_bounded(cmd, Duration::from_secs(30))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} failed ({}): {}{}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// `cmd` to completion with stdout and stderr captured (stdin empty), killed past `limit`; unlike
/// `Bounded::output_within` an Err rather than a panic, so that it can run in `Drop` and a
/// client's timeout is a failed request.
pub(super) fn run_bounded(mut cmd: Command, limit: Duration) -> Result<Output, String> {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {what}: {e}"))?;
    fn reader(pipe: Option<impl Read + Send + 'static>) -> thread::JoinHandle<Vec<u8>> {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    }
    let (stdout, stderr) = (reader(child.stdout.take()), reader(child.stderr.take()));
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what} did not finish within {limit:?}: killed"));
            }
            Err(e) => return Err(format!("waiting for {what}: {e}")),
        }
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}
