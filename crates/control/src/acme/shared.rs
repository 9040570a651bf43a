//! The store a fleet shares, Redis or etcd, as the few operations ACME needs of it: values, a
//! value written only by the first instance, a lock that expires, and small maps (the challenge
//! answers).
//!
//! - Redis (`storage = "redis://..."`): keys `rampart:acme:PART:PART`, maps as hashes, the lock
//!   `SET NX PX`, released by a script that checks its owner.
//! - etcd (`storage = "etcd"`, the etcd the config comes from): keys `PREFIX` + `acme/PART/PART`
//!   (`/rampart/acme/...` by default), a map's entries as keys under `acme/MAP/`, the lock a
//!   key created only when absent with a lease of its own, released by a compare-and-delete.
//!   etcd's client is blocking: each call runs on tokio's blocking threads.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::redis::{Answer, Redis};
use crate::etcd::Etcd;

const REDIS_PREFIX: &str = "rampart:acme:";
/// Releases a Redis lock only for its owner.
const UNLOCK: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

pub enum Shared {
    Redis(Redis),
    Etcd(Arc<Etcd>),
}

impl Shared {
    /// The key for `parts` (`["cert", "a.example"]`).
    fn key(&self, parts: &[&str]) -> String {
        match self {
            Shared::Redis(_) => format!("{REDIS_PREFIX}{}", parts.join(":")),
            Shared::Etcd(etcd) => etcd.key(&format!("acme/{}", parts.join("/"))),
        }
    }

    /// Where the store is, for messages.
    pub fn describe(&self) -> String {
        match self {
            Shared::Redis(_) => "Redis".to_string(),
            Shared::Etcd(etcd) => format!("etcd under {}", etcd.key("acme/")),
        }
    }

    pub async fn get(&mut self, parts: &[&str]) -> anyhow::Result<Option<Vec<u8>>> {
        let key = self.key(parts);
        match self {
            Shared::Redis(redis) => match redis.run(&[b"GET", key.as_bytes()]).await? {
                Answer::Bytes(value) => Ok(value),
                _ => Ok(None),
            },
            Shared::Etcd(etcd) => blocking(etcd, move |e| e.value(&key)).await,
        }
    }

    pub async fn set(&mut self, parts: &[&str], value: &[u8]) -> anyhow::Result<()> {
        let key = self.key(parts);
        match self {
            Shared::Redis(redis) => redis.run(&[b"SET", key.as_bytes(), value]).await.map(drop),
            Shared::Etcd(etcd) => {
                let value = value.to_vec();
                blocking(etcd, move |e| e.put(&key, &value)).await
            }
        }
    }

    /// Writes `value` unless the key exists (another instance's is kept).
    pub async fn set_first(&mut self, parts: &[&str], value: &[u8]) -> anyhow::Result<()> {
        self.create(parts, value, None).await.map(drop)
    }

    /// Takes the lock `parts` for `owner`, for `hold` at most; `false` when someone holds it.
    pub async fn lock(&mut self, parts: &[&str], owner: &str, hold: Duration) -> anyhow::Result<bool> {
        self.create(parts, owner.as_bytes(), Some(hold)).await
    }

    async fn create(&mut self, parts: &[&str], value: &[u8], hold: Option<Duration>) -> anyhow::Result<bool> {
        let key = self.key(parts);
        match self {
            Shared::Redis(redis) => {
                let ms = hold.map(|h| h.as_millis().to_string());
                let mut command: Vec<&[u8]> = vec![b"SET", key.as_bytes(), value, b"NX"];
                if let Some(ms) = &ms {
                    command.extend([&b"PX"[..], ms.as_bytes()]);
                }
                Ok(redis.run(&command).await? == Answer::Ok)
            }
            Shared::Etcd(etcd) => {
                let (value, ttl) = (value.to_vec(), hold.map(|h| h.as_secs().max(1)));
                blocking(etcd, move |e| e.create(&key, &value, ttl)).await
            }
        }
    }

    /// Releases the lock `parts` if `owner` holds it.
    pub async fn unlock(&mut self, parts: &[&str], owner: &str) -> anyhow::Result<()> {
        let key = self.key(parts);
        match self {
            Shared::Redis(redis) => redis
                .run(&[b"EVAL", UNLOCK.as_bytes(), b"1", key.as_bytes(), owner.as_bytes()])
                .await
                .map(drop),
            Shared::Etcd(etcd) => {
                let owner = owner.as_bytes().to_vec();
                blocking(etcd, move |e| e.delete(&key, Some(&owner))).await
            }
        }
    }

    /// Sets (or, with `None`, removes) `field` of the map `map`.
    pub async fn set_entry(&mut self, map: &str, field: &str, value: Option<&[u8]>) -> anyhow::Result<()> {
        match self {
            Shared::Redis(redis) => {
                let hash = format!("{REDIS_PREFIX}{map}");
                match value {
                    Some(v) => redis.run(&[b"HSET", hash.as_bytes(), field.as_bytes(), v]).await?,
                    None => redis.run(&[b"HDEL", hash.as_bytes(), field.as_bytes()]).await?,
                };
                Ok(())
            }
            Shared::Etcd(etcd) => {
                let key = etcd.key(&format!("acme/{map}/{field}"));
                let value = value.map(<[u8]>::to_vec);
                blocking(etcd, move |e| match value {
                    Some(v) => e.put(&key, &v),
                    None => e.delete(&key, None),
                })
                .await
            }
        }
    }

    /// `field` of the map `map`, if it is there.
    pub async fn entry(&mut self, map: &str, field: &str) -> anyhow::Result<Option<String>> {
        let value = match self {
            Shared::Redis(redis) => {
                let hash = format!("{REDIS_PREFIX}{map}");
                match redis.run(&[b"HGET", hash.as_bytes(), field.as_bytes()]).await? {
                    Answer::Bytes(value) => value,
                    _ => None,
                }
            }
            Shared::Etcd(etcd) => {
                let key = etcd.key(&format!("acme/{map}/{field}"));
                blocking(etcd, move |e| e.value(&key)).await?
            }
        };
        Ok(value.map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// Every entry of the map `map`.
    pub async fn entries(&mut self, map: &str) -> anyhow::Result<Vec<(String, String)>> {
        let pairs = match self {
            Shared::Redis(redis) => {
                let hash = format!("{REDIS_PREFIX}{map}");
                let Answer::List(items) = redis.run(&[b"HGETALL", hash.as_bytes()]).await? else {
                    return Ok(Vec::new());
                };
                items
                    .chunks(2)
                    .filter_map(|pair| match pair {
                        [Answer::Bytes(Some(k)), Answer::Bytes(Some(v))] => Some((k.clone(), v.clone())),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
            }
            Shared::Etcd(etcd) => {
                let prefix = etcd.key(&format!("acme/{map}/"));
                blocking(etcd, move |e| e.under(&prefix))
                    .await?
                    .into_iter()
                    .map(|(k, v)| (k.into_bytes(), v))
                    .collect()
            }
        };
        Ok(pairs
            .into_iter()
            .map(|(k, v)| {
                (
                    String::from_utf8_lossy(&k).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect())
    }
}

/// `call` on etcd, off the async threads.
async fn blocking<T: Send + 'static>(
    etcd: &Arc<Etcd>,
    call: impl FnOnce(&Etcd) -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    let etcd = etcd.clone();
    tokio::task::spawn_blocking(move || call(&etcd))
        .await
        .context("an etcd call did not finish")?
}
