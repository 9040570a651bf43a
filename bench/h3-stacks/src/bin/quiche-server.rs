//! HTTP/3 server on Cloudflare's quiche, driven by one non-blocking std UDP socket on one
//! thread (poll(2) for readiness and timers). Every request gets 200 and "hello, world\n".
//! By default plain recv_from/send_to, one datagram per syscall: no GSO/GRO, no
//! recvmmsg/sendmmsg (quiche leaves all I/O to the application). No Retry (quinn's default
//! has none either).
//! With QUICHE_BATCH_IO=1 in the environment it uses recvmmsg and GSO (UDP_SEGMENT) instead,
//! written here, to show what batching added by the application is worth.
//! Usage: quiche-server [PORT] [CERT.pem KEY.pem]
use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Instant;

use quiche::ConnectionId;
use ring::rand::SecureRandom;

const BODY: &[u8] = b"hello, world\n";
const MAX_UDP: usize = 1350;
const RECV_BATCH: usize = 64;

struct Pending {
    headers_sent: bool,
    body_off: usize,
}

struct Client {
    conn: quiche::Connection,
    h3: Option<quiche::h3::Connection>,
    pending: HashMap<u64, Pending>,
    dirty: bool,
}

fn cert_files(args: &[String]) -> (String, String) {
    if args.len() >= 4 {
        return (args[2].clone(), args[3].clone());
    }
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).expect("rcgen");
    let dir = std::env::temp_dir().join(format!("quiche-server-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = dir.join("cert.pem");
    let k = dir.join("key.pem");
    std::fs::write(&c, ck.cert.pem()).unwrap();
    std::fs::write(&k, ck.signing_key.serialize_pem()).unwrap();
    (c.to_str().unwrap().into(), k.to_str().unwrap().into())
}

/// Try to (continue to) write the canned response on `sid`. Returns true when done.
fn respond(
    conn: &mut quiche::Connection,
    h3: &mut quiche::h3::Connection,
    sid: u64,
    p: &mut Pending,
) -> Result<bool, ()> {
    if !p.headers_sent {
        let hdrs = [
            quiche::h3::Header::new(b":status", b"200"),
            quiche::h3::Header::new(b"content-length", b"13"),
        ];
        match h3.send_response(conn, sid, &hdrs, false) {
            Ok(()) => p.headers_sent = true,
            Err(quiche::h3::Error::StreamBlocked) | Err(quiche::h3::Error::Done) => return Ok(false),
            Err(_) => return Err(()),
        }
    }
    match h3.send_body(conn, sid, &BODY[p.body_off..], true) {
        Ok(n) => {
            p.body_off += n;
            Ok(p.body_off == BODY.len())
        }
        Err(quiche::h3::Error::Done) => Ok(false),
        Err(_) => Err(()),
    }
}

fn drive_h3(c: &mut Client, h3cfg: &quiche::h3::Config) {
    if c.h3.is_none() && c.conn.is_established() {
        match quiche::h3::Connection::with_transport(&mut c.conn, h3cfg) {
            Ok(h) => c.h3 = Some(h),
            Err(_) => {
                let _ = c.conn.close(false, 0x101, b"h3 setup");
                return;
            }
        }
    }
    let Some(h3) = c.h3.as_mut() else { return };
    // Streams that became writable again: finish their responses.
    if !c.pending.is_empty() {
        let ws: Vec<u64> = c.conn.writable().collect();
        for sid in ws {
            if let Some(p) = c.pending.get_mut(&sid) {
                match respond(&mut c.conn, h3, sid, p) {
                    Ok(true) | Err(()) => {
                        c.pending.remove(&sid);
                    }
                    Ok(false) => {}
                }
            }
        }
    }
    let mut sink = [0u8; 4096];
    loop {
        match h3.poll(&mut c.conn) {
            Ok((sid, quiche::h3::Event::Headers { .. })) => {
                let mut p = Pending {
                    headers_sent: false,
                    body_off: 0,
                };
                match respond(&mut c.conn, h3, sid, &mut p) {
                    Ok(true) | Err(()) => {}
                    Ok(false) => {
                        c.pending.insert(sid, p);
                    }
                }
            }
            Ok((sid, quiche::h3::Event::Data)) => {
                while let Ok(n) = h3.recv_body(&mut c.conn, sid, &mut sink) {
                    if n == 0 {
                        break;
                    }
                }
            }
            Ok((sid, quiche::h3::Event::Reset(_))) => {
                c.pending.remove(&sid);
            }
            Ok(_) => {}
            Err(quiche::h3::Error::Done) => break,
            Err(_) => {
                let _ = c.conn.close(true, 0x101, b"h3 error");
                break;
            }
        }
    }
}

fn flush(sock: &UdpSocket, conn: &mut quiche::Connection, out: &mut [u8]) {
    loop {
        match conn.send(out) {
            Ok((n, info)) => {
                // On WouldBlock the datagram is dropped; QUIC loss recovery resends it.
                let _ = sock.send_to(&out[..n], info.to);
            }
            Err(quiche::Error::Done) => break,
            Err(_) => {
                let _ = conn.close(false, 0x1, b"send failed");
                break;
            }
        }
    }
}

/// One datagram per recvfrom, up to RECV_BATCH per wakeup.
fn recv_plain(sock: &UdpSocket, bufs: &mut [Vec<u8>], meta: &mut [(usize, SocketAddr)]) -> usize {
    let mut n = 0;
    while n < bufs.len() {
        match sock.recv_from(&mut bufs[n]) {
            Ok(v) => {
                meta[n] = v;
                n += 1;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => panic!("recv_from: {e}"),
        }
    }
    n
}

/// Optional batched I/O (QUICHE_BATCH_IO=1): what an application must add itself on top of
/// quiche. IPv4 only, enough for this benchmark.
mod batch_io {
    use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
    use std::os::fd::AsRawFd;

    fn to_sockaddr(a: SocketAddr) -> libc::sockaddr_in {
        let SocketAddr::V4(v4) = a else { panic!("IPv4 only") };
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sa.sin_family = libc::AF_INET as _;
        sa.sin_port = v4.port().to_be();
        sa.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
        sa
    }

    /// recvmmsg, up to bufs.len() datagrams in one call (no GRO).
    pub fn recv_mmsg(sock: &UdpSocket, bufs: &mut [Vec<u8>], meta: &mut [(usize, SocketAddr)]) -> usize {
        let n = bufs.len();
        let mut names: Vec<libc::sockaddr_in> = vec![unsafe { std::mem::zeroed() }; n];
        let mut iovs: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr() as *mut _,
                iov_len: b.len(),
            })
            .collect();
        let mut hdrs: Vec<libc::mmsghdr> = (0..n)
            .map(|i| {
                let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                h.msg_hdr.msg_name = &mut names[i] as *mut _ as *mut _;
                h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as _;
                h.msg_hdr.msg_iov = &mut iovs[i];
                h.msg_hdr.msg_iovlen = 1;
                h
            })
            .collect();
        let r = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                hdrs.as_mut_ptr(),
                n as _,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r <= 0 {
            return 0;
        }
        for i in 0..r as usize {
            let sa = &names[i];
            let ip = std::net::Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr));
            meta[i] = (
                hdrs[i].msg_len as usize,
                SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sa.sin_port))),
            );
        }
        r as usize
    }

    fn send_segments(sock: &UdpSocket, buf: &[u8], seg: usize, to: SocketAddr) {
        let mut sa = to_sockaddr(to);
        let mut iov = libc::iovec {
            iov_base: buf.as_ptr() as *mut _,
            iov_len: buf.len(),
        };
        let mut cmsg_buf = [0u64; 8];
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = &mut sa as *mut _ as *mut _;
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as _;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if buf.len() > seg {
            msg.msg_control = cmsg_buf.as_mut_ptr() as *mut _;
            msg.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = libc::UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(2) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, seg as u16);
            }
        }
        unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, 0) };
    }

    /// Drain the connection's packets, sending runs of equal-size packets with one GSO sendmsg.
    pub fn flush_gso(sock: &UdpSocket, conn: &mut quiche::Connection, buf: &mut [u8]) {
        const MAX_SEGS: usize = 64;
        let max = super::MAX_UDP;
        let mut off = 0;
        let mut seg = 0;
        let mut count = 0;
        let mut to = None;
        loop {
            if off + max > buf.len() || count == MAX_SEGS {
                send_segments(sock, &buf[..off], seg, to.unwrap());
                off = 0;
                count = 0;
            }
            match conn.send(&mut buf[off..off + max]) {
                Ok((n, info)) => {
                    if count == 0 {
                        seg = n;
                        to = Some(info.to);
                        off = n;
                        count = 1;
                    } else if n == seg && Some(info.to) == to {
                        off += n;
                        count += 1;
                    } else if n < seg && Some(info.to) == to {
                        // A shorter packet may end a GSO batch.
                        send_segments(sock, &buf[..off + n], seg, info.to);
                        off = 0;
                        count = 0;
                    } else {
                        // Longer (or elsewhere): send the batch, then this packet alone.
                        send_segments(sock, &buf[..off], seg, to.unwrap());
                        send_segments(sock, &buf[off..off + n], n, info.to);
                        off = 0;
                        count = 0;
                    }
                }
                Err(quiche::Error::Done) => break,
                Err(_) => {
                    let _ = conn.close(false, 0x1, b"send failed");
                    break;
                }
            }
        }
        if count > 0 {
            send_segments(sock, &buf[..off], seg, to.unwrap());
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args.get(1).map(|p| p.parse().expect("port")).unwrap_or(4434);
    let (cert, key) = cert_files(&args);

    let mut cfg = quiche::Config::new(quiche::PROTOCOL_VERSION).unwrap();
    cfg.load_cert_chain_from_pem_file(&cert).expect("cert");
    cfg.load_priv_key_from_pem_file(&key).expect("key");
    if args.len() < 4 {
        // Our generated files were only needed for loading.
        let _ = std::fs::remove_dir_all(std::path::Path::new(&cert).parent().unwrap());
    }
    cfg.set_application_protos(quiche::h3::APPLICATION_PROTOCOL).unwrap();
    cfg.set_max_idle_timeout(30_000);
    cfg.set_max_recv_udp_payload_size(MAX_UDP);
    cfg.set_max_send_udp_payload_size(MAX_UDP);
    cfg.set_initial_max_data(10_000_000);
    cfg.set_initial_max_stream_data_bidi_local(1_000_000);
    cfg.set_initial_max_stream_data_bidi_remote(1_000_000);
    cfg.set_initial_max_stream_data_uni(1_000_000);
    cfg.set_initial_max_streams_bidi(100);
    cfg.set_initial_max_streams_uni(100);
    cfg.set_disable_active_migration(true);
    let h3cfg = quiche::h3::Config::new().unwrap();

    let rng = ring::rand::SystemRandom::new();
    let mut seed = [0u8; 32];
    rng.fill(&mut seed).unwrap();
    let cid_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &seed);

    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let sock = UdpSocket::bind(addr).expect("bind");
    sock.set_nonblocking(true).unwrap();
    let local = sock.local_addr().unwrap();
    println!(
        "quiche-server ready on udp {} pid {} io {}",
        local,
        std::process::id(),
        if std::env::var_os("QUICHE_BATCH_IO").is_some_and(|v| v == "1") {
            "recvmmsg+GSO"
        } else {
            "plain recvfrom/sendto"
        }
    );

    let mut clients: HashMap<ConnectionId<'static>, Client> = HashMap::new();
    let batched = std::env::var_os("QUICHE_BATCH_IO").is_some_and(|v| v == "1");
    let mut bufs: Vec<Vec<u8>> = (0..RECV_BATCH).map(|_| vec![0u8; 2048]).collect();
    let mut meta: Vec<(usize, SocketAddr)> = vec![(0, local); RECV_BATCH];
    let mut gso_buf = vec![0u8; 65536];
    let mut out = vec![0u8; MAX_UDP];

    loop {
        // Wait for a datagram or the earliest connection timer.
        let timeout = clients.values().filter_map(|c| c.conn.timeout()).min();
        let ms: i32 = match timeout {
            None => -1,
            Some(d) => d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32,
        };
        let mut pfd = libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r == 0 || timeout.is_some() {
            let now = Instant::now();
            for c in clients.values_mut() {
                if c.conn.timeout_instant().is_some_and(|t| t <= now) {
                    c.conn.on_timeout();
                    c.dirty = true;
                }
            }
        }

        let got = if batched {
            batch_io::recv_mmsg(&sock, &mut bufs, &mut meta)
        } else {
            recv_plain(&sock, &mut bufs, &mut meta)
        };
        for i in 0..got {
            let (len, from) = meta[i];
            let pkt = &mut bufs[i][..len];
            let hdr = match quiche::Header::from_slice(pkt, quiche::MAX_CONN_ID_LEN) {
                Ok(h) => h,
                Err(_) => continue,
            };
            let key = if clients.contains_key(&hdr.dcid) {
                hdr.dcid.clone().into_owned()
            } else {
                let tag = ring::hmac::sign(&cid_key, &hdr.dcid);
                let derived = ConnectionId::from_vec(tag.as_ref()[..quiche::MAX_CONN_ID_LEN].to_vec());
                if clients.contains_key(&derived) {
                    derived
                } else {
                    if hdr.ty != quiche::Type::Initial {
                        continue;
                    }
                    if !quiche::version_is_supported(hdr.version) {
                        if let Ok(n) = quiche::negotiate_version(&hdr.scid, &hdr.dcid, &mut out) {
                            let _ = sock.send_to(&out[..n], from);
                        }
                        continue;
                    }
                    let conn = match quiche::accept(&derived, None, local, from, &mut cfg) {
                        Ok(c) => c,
                        Err(_) => continue,
                    };
                    clients.insert(
                        derived.clone(),
                        Client {
                            conn,
                            h3: None,
                            pending: HashMap::new(),
                            dirty: false,
                        },
                    );
                    derived
                }
            };
            let c = clients.get_mut(&key).unwrap();
            let info = quiche::RecvInfo { from, to: local };
            if c.conn.recv(pkt, info).is_ok() {
                c.dirty = true;
            }
        }

        for c in clients.values_mut() {
            if !c.dirty {
                continue;
            }
            c.dirty = false;
            drive_h3(c, &h3cfg);
            if batched {
                batch_io::flush_gso(&sock, &mut c.conn, &mut gso_buf);
            } else {
                flush(&sock, &mut c.conn, &mut out);
            }
        }
        clients.retain(|_, c| !c.conn.is_closed());
    }
}
