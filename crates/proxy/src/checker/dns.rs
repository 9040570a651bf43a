//! The DNS health check of a UDP upstream's target: one query (type A, class IN, recursion
//! desired) for the check's name over UDP; the target is up when an answer to that query comes
//! with NOERROR or NXDOMAIN (it serves, whatever the name's fate), down on any other code, on an
//! ICMP refusal, or on silence (the checker's timeout).

use std::net::SocketAddr;

use tokio::net::UdpSocket;

/// The query for `name` with id `id`, as RFC 1035 §4.1 lays it out.
pub(super) fn query(id: u16, name: &str) -> Vec<u8> {
    let mut q = Vec::with_capacity(18 + name.len());
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00]); // a standard query, recursion desired
    q.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]); // one question
    for label in name.split('.').filter(|l| !l.is_empty()) {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&[0, 1, 0, 1]); // type A, class IN
    q
}

/// Whether `reply` answers query `id` as a server that works does: a response (QR set) with
/// the same id and the rcode NOERROR (0) or NXDOMAIN (3). `Err` says what it was otherwise;
/// `Ok(false)`: not a reply to this query at all (ignored).
pub(super) fn judge(id: u16, reply: &[u8]) -> Result<bool, String> {
    if reply.len() < 12 || reply[..2] != id.to_be_bytes() || reply[2] & 0x80 == 0 {
        return Ok(false);
    }
    match reply[3] & 0x0f {
        0 | 3 => Ok(true),
        2 => Err("SERVFAIL".to_string()),
        5 => Err("REFUSED".to_string()),
        code => Err(format!("rcode {code}")),
    }
}

/// Asks `target` about `name`; `Ok` once it answered as a working server does.
pub(super) async fn check(target: SocketAddr, name: &str) -> Result<(), String> {
    let local: SocketAddr = match target {
        SocketAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
        SocketAddr::V6(_) => ([0u16; 8], 0).into(),
    };
    let socket = UdpSocket::bind(local).await.map_err(|e| e.to_string())?;
    socket.connect(target).await.map_err(|e| e.to_string())?;
    let id = rand_id();
    socket.send(&query(id, name)).await.map_err(|e| e.to_string())?;
    let mut buf = [0u8; 1500];
    loop {
        let n = socket.recv(&mut buf).await.map_err(|e| e.to_string())?;
        if judge(id, &buf[..n])? {
            return Ok(());
        }
    }
}

/// A query id that differs from check to check (not a secret: the socket is connected, so only
/// the target can answer it).
fn rand_id() -> u16 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (nanos ^ (nanos >> 16)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_is_laid_out_as_rfc_1035_says() {
        let q = query(0xbeef, "health.example.");
        assert_eq!(&q[..12], &[0xbe, 0xef, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&q[12..], b"\x06health\x07example\x00\x00\x01\x00\x01");
    }

    #[test]
    fn only_a_reply_to_the_query_counts_and_its_rcode_decides() {
        let mut reply = query(7, "a.example");
        reply[2] |= 0x80;
        assert_eq!(judge(7, &reply), Ok(true));
        reply[3] = 0x83; // NXDOMAIN: the server works
        assert_eq!(judge(7, &reply), Ok(true));
        reply[3] = 0x82;
        assert_eq!(judge(7, &reply), Err("SERVFAIL".to_string()));
        assert_eq!(judge(8, &reply), Ok(false), "another id");
        assert_eq!(judge(7, &query(7, "a.example")), Ok(false), "a query, not a reply");
        assert_eq!(judge(7, &[0, 7]), Ok(false), "too short");
    }
}
