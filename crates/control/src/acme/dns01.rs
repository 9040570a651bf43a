//! The DNS-01 challenge (RFC 8555 §8.4): the answer is a TXT record `_acme-challenge.NAME`
//! (for `*.b.example`, `_acme-challenge.b.example`) holding the key authorization's digest.
//! It is added with a dynamic update (RFC 2136) signed with the `[acme.dns01]` TSIG key
//! (RFC 8945), sent over UDP to the zone's primary server; the record is then read back from
//! that server before the CA is told to look, and deleted again once the order is decided.
//!
//! Messages are built, signed and checked by hickory-proto; only the one-datagram exchange is
//! here. Nothing from the network is trusted to be well-formed: a malformed, unsigned or
//! wrongly signed answer is an error, never a panic.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context};
use hickory_proto::dnssec::rdata::tsig::TsigAlgorithm as HickoryTsig;
use hickory_proto::dnssec::rdata::DNSSECRData;
use hickory_proto::dnssec::tsig::TSigner;
use hickory_proto::op::{update_message, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::TXT;
use hickory_proto::rr::{Name, RData, Record, RecordSet, RecordType};
use instant_acme::{ChallengeHandle, Identifier};
use rampart_model::acme::{Dns01Settings, TsigAlgorithm};

/// The TTL of the TXT record (short: it lives only while the CA validates).
const TTL: u32 = 60;
/// The most a DNS server may take to answer one datagram; each is sent [`TRIES`] times.
const ANSWER_WAIT: Duration = Duration::from_secs(2);
const TRIES: u32 = 3;
/// The most the updated server may take to serve the record it accepted.
const VISIBLE_WAIT: Duration = Duration::from_secs(30);
/// How far the server's clock may be from ours (BIND's default fudge).
const FUDGE: u16 = 300;

/// Publishes DNS-01 answers on the `[acme.dns01]` server.
pub struct Dns01 {
    settings: Dns01Settings,
    signer: TSigner,
}

/// A TXT record this added, to withdraw.
pub struct Published {
    zone: Name,
    record: Record,
}

impl Dns01 {
    pub fn new(settings: &Dns01Settings) -> anyhow::Result<Dns01> {
        let algorithm = match settings.key.algorithm {
            TsigAlgorithm::HmacSha256 => HickoryTsig::HmacSha256,
            TsigAlgorithm::HmacSha384 => HickoryTsig::HmacSha384,
            TsigAlgorithm::HmacSha512 => HickoryTsig::HmacSha512,
        };
        let name =
            Name::from_ascii(&settings.key.name).with_context(|| format!("TSIG key name `{}`", settings.key.name))?;
        let signer = TSigner::new(settings.key.secret.clone(), algorithm, name, FUDGE)
            .map_err(|e| anyhow!("TSIG key `{}`: {e}", settings.key.name))?;
        Ok(Dns01 {
            settings: settings.clone(),
            signer,
        })
    }

    /// Adds the TXT record that answers `challenge` (noted in `published` as soon as the server
    /// took it, to be withdrawn even if what follows fails), and waits until the server serves it.
    pub async fn publish(&self, challenge: &ChallengeHandle<'_>, published: &mut Vec<Published>) -> anyhow::Result<()> {
        let Identifier::Dns(domain) = challenge.identifier().identifier else {
            bail!("DNS-01 answers only DNS names");
        };
        let owner = Name::from_ascii(format!("_acme-challenge.{}.", domain.trim_end_matches('.')))
            .with_context(|| format!("`_acme-challenge.{domain}` is not a DNS name"))?;
        let value = challenge.key_authorization().dns_value();
        let zone = self.zone_of(&owner).await?;
        let record = Record::from_rdata(owner.clone(), TTL, RData::TXT(TXT::new(vec![value.clone()])));
        let update = update_message::append(RecordSet::from(record.clone()), zone.clone(), false, false);
        self.update(update, &zone)
            .await
            .with_context(|| format!("adding TXT {owner}"))?;
        tracing::info!(
            "acme: {domain}: DNS-01 record {owner} added on {}",
            self.settings.server
        );
        published.push(Published { zone, record });
        self.wait_visible(&owner, &value).await
    }

    /// Deletes the records `published` added (only those values: another order's stay).
    /// A failure is logged, not returned: the certificate does not depend on it.
    pub async fn withdraw(&self, published: &[Published]) {
        for p in published {
            let update = update_message::delete_by_rdata(RecordSet::from(p.record.clone()), p.zone.clone(), false);
            let owner = p.record.name();
            match self.update(update, &p.zone).await {
                Ok(()) => tracing::info!("acme: DNS-01 record {owner} withdrawn from {}", self.settings.server),
                Err(e) => tracing::warn!("acme: DNS-01 record {owner} left on {}: {e:#}", self.settings.server),
            }
        }
    }

    /// The zone to update for `owner`: the configured one, else the one whose SOA the server
    /// gives when asked for `owner`'s SOA (in the answer at an apex, else in the authority).
    async fn zone_of(&self, owner: &Name) -> anyhow::Result<Name> {
        if let Some(zone) = &self.settings.zone {
            let zone = Name::from_ascii(format!("{zone}.")).with_context(|| format!("zone `{zone}`"))?;
            if !zone.zone_of(owner) {
                bail!("{owner} is not in the [acme.dns01] zone {zone}");
            }
            return Ok(zone);
        }
        let answer = self.exchange(query(owner, RecordType::SOA), None).await?;
        let soa = answer
            .answers()
            .iter()
            .chain(answer.name_servers())
            .find(|r| r.record_type() == RecordType::SOA && r.name().zone_of(owner));
        match soa {
            Some(record) => Ok(record.name().clone()),
            None => bail!(
                "{} names no zone for {owner} (answer {}): set `zone` in [acme.dns01]",
                self.settings.server,
                answer.response_code()
            ),
        }
    }

    /// Sends a signed `update` for `zone` and checks the signed answer.
    async fn update(&self, mut update: Message, zone: &Name) -> anyhow::Result<()> {
        let now = unix_now();
        let verifier = update
            .finalize(&self.signer, now)
            .map_err(|e| anyhow!("signing the update: {e}"))?
            .ok_or_else(|| anyhow!("signing the update: no check for its answer"))?;
        let answer = self.exchange(update, Some(verifier)).await?;
        match answer.response_code() {
            ResponseCode::NoError => Ok(()),
            ResponseCode::Refused => bail!(
                "{} refused the update of zone {zone} (does its allow-update or update-policy let key `{}` in?)",
                self.settings.server,
                self.settings.key.name
            ),
            ResponseCode::NotZone | ResponseCode::NotAuth => bail!(
                "{} is not the primary server of zone {zone} ({}): check `server` and `zone` in [acme.dns01]",
                self.settings.server,
                answer.response_code()
            ),
            other => bail!("{} answered the update with {other}", self.settings.server),
        }
    }

    /// Polls `server` until it serves `value` in the TXT records of `owner`.
    async fn wait_visible(&self, owner: &Name, value: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + VISIBLE_WAIT;
        loop {
            let answer = self.exchange(query(owner, RecordType::TXT), None).await?;
            let found = answer.answers().iter().any(|r| match r.data() {
                RData::TXT(txt) => txt.txt_data().iter().any(|d| &**d == value.as_bytes()),
                _ => false,
            });
            if found {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} accepted TXT {owner} but did not serve it within {VISIBLE_WAIT:?}",
                    self.settings.server
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// One request and its answer over UDP, sent again when no answer comes. With a
    /// `verifier` (a signed request), the answer must carry a valid TSIG signature; a TSIG error
    /// the server reports (a wrong secret, an unknown key, a skewed clock) is said as such.
    async fn exchange(
        &self,
        request: Message,
        mut verifier: Option<hickory_proto::op::MessageVerifier>,
    ) -> anyhow::Result<Message> {
        let server = self.settings.server;
        let bytes = request.to_vec().map_err(|e| anyhow!("encoding a DNS message: {e}"))?;
        let local: SocketAddr = match server {
            SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let socket = tokio::net::UdpSocket::bind(local).await?;
        socket
            .connect(server)
            .await
            .with_context(|| format!("DNS server {server}"))?;
        let mut buf = vec![0u8; 65535];
        for _ in 0..TRIES {
            socket
                .send(&bytes)
                .await
                .with_context(|| format!("DNS server {server}"))?;
            let deadline = tokio::time::Instant::now() + ANSWER_WAIT;
            loop {
                let received = match tokio::time::timeout_at(deadline, socket.recv(&mut buf)).await {
                    Err(_) => break,
                    Ok(Err(e)) => return Err(e).with_context(|| format!("DNS server {server}")),
                    Ok(Ok(n)) => &buf[..n],
                };
                let Ok(answer) = Message::from_vec(received) else {
                    continue;
                };
                if answer.id() != request.id() || answer.message_type() != MessageType::Response {
                    continue;
                }
                if answer.truncated() {
                    bail!("{server} truncated its answer (DNS over TCP is not done here)");
                }
                if let Some(verifier) = verifier.as_mut() {
                    self.check_signature(&answer, received, verifier)?;
                }
                return Ok(answer);
            }
        }
        bail!("no answer from DNS server {server} ({TRIES} tries, {ANSWER_WAIT:?} each)")
    }

    /// The TSIG checks of a signed request's answer.
    fn check_signature(
        &self,
        answer: &Message,
        bytes: &[u8],
        verifier: &mut hickory_proto::op::MessageVerifier,
    ) -> anyhow::Result<()> {
        let server = self.settings.server;
        let key = &self.settings.key.name;
        let tsig = answer.signature().iter().find_map(|r| match r.data() {
            RData::DNSSEC(DNSSECRData::TSIG(tsig)) => Some(tsig),
            _ => None,
        });
        let Some(tsig) = tsig else {
            bail!(
                "{server} answered {} without a TSIG signature (does it know key `{key}`?)",
                answer.response_code()
            );
        };
        // The error field has no accessor in hickory-proto 0.25; its text form is
        // "ALGORITHM TIME FUDGE MAC OID ERROR OTHER".
        let error: u16 = tsig
            .to_string()
            .split(' ')
            .nth(5)
            .and_then(|e| e.parse().ok())
            .unwrap_or(0);
        match error {
            0 => {}
            16 => bail!("{server} refused the TSIG signature (BADSIG): is the secret of key `{key}` the server's?"),
            17 => bail!("{server} does not know TSIG key `{key}` with this algorithm (BADKEY)"),
            18 => {
                bail!("{server} refused the TSIG signature's time (BADTIME): the clocks differ by more than {FUDGE} s")
            }
            other => bail!("{server} refused the TSIG signature (error {other})"),
        }
        // hickory computes `time - fudge` unchecked: refuse what would underflow.
        if tsig.time() < u64::from(tsig.fudge()) {
            bail!("{server} signed its answer with an impossible time");
        }
        verifier(bytes).map_err(|e| anyhow!("{server}'s answer fails the TSIG check of key `{key}`: {e}"))?;
        Ok(())
    }
}

/// A plain (unsigned, non-recursive) query.
fn query(name: &Name, kind: RecordType) -> Message {
    let mut message = Message::new();
    message
        .set_id(rand_id())
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(false)
        .add_query(Query::query(name.clone(), kind));
    message
}

fn rand_id() -> u16 {
    // Not a secret: the answer comes back on a connected socket of its own.
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    (nanos ^ (nanos >> 16)) as u16
}

fn unix_now() -> u32 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    u32::try_from(secs).unwrap_or(u32::MAX)
}
