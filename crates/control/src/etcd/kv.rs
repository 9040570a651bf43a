//! Plain key-value use of etcd beside the config: what ACME's shared store needs (values, a
//! create-if-absent, a lock that expires with its lease, a compare-and-delete, a prefix read).
//! Keys are under the same prefix as the config. Blocking calls, like the rest of this client.

use anyhow::Context;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::json;

use super::client::number;
use super::Etcd;

impl Etcd {
    /// `rest` under this instance's prefix (`/rampart/` + `acme/...`).
    pub(crate) fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    /// The value of `key`, if there is one.
    pub(crate) fn value(&self, key: &str) -> anyhow::Result<Option<Vec<u8>>> {
        let reply = self.call("/v3/kv/range", &json!({ "key": STANDARD.encode(key) }))?;
        reply["kvs"][0]["value"]
            .as_str()
            .map(|v| STANDARD.decode(v).context("etcd sent a value that is not base64"))
            .transpose()
    }

    /// Writes `value` under `key`.
    pub(crate) fn put(&self, key: &str, value: &[u8]) -> anyhow::Result<()> {
        let request = json!({ "key": STANDARD.encode(key), "value": STANDARD.encode(value) });
        self.call("/v3/kv/put", &request)?;
        Ok(())
    }

    /// Writes `value` under `key` only if there is no such key (kept for `ttl_seconds` when
    /// given: the key goes with a lease that is never renewed); whether it was written.
    pub(crate) fn create(&self, key: &str, value: &[u8], ttl_seconds: Option<u64>) -> anyhow::Result<bool> {
        let key = STANDARD.encode(key);
        let mut put = json!({ "key": key, "value": STANDARD.encode(value) });
        if let Some(ttl) = ttl_seconds {
            let lease = self.call("/v3/lease/grant", &json!({ "TTL": ttl.to_string() }))?;
            put["lease"] = number(&lease["ID"]).to_string().into();
        }
        let request = json!({
            "compare": [{ "key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0" }],
            "success": [{ "request_put": put }],
        });
        let reply = self.call("/v3/kv/txn", &request)?;
        Ok(reply["succeeded"].as_bool() == Some(true))
    }

    /// Deletes `key`; with `only_if`, only while its value is that.
    pub(crate) fn delete(&self, key: &str, only_if: Option<&[u8]>) -> anyhow::Result<()> {
        let key = STANDARD.encode(key);
        let delete = json!({ "request_delete_range": { "key": key } });
        match only_if {
            None => self.call("/v3/kv/deleterange", &json!({ "key": key }))?,
            Some(value) => self.call(
                "/v3/kv/txn",
                &json!({
                    "compare": [{ "key": key, "target": "VALUE", "result": "EQUAL", "value": STANDARD.encode(value) }],
                    "success": [delete],
                }),
            )?,
        };
        Ok(())
    }

    /// Every key under `prefix` with its value, the prefix taken off the keys.
    pub(crate) fn under(&self, prefix: &str) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
        let request = json!({ "key": STANDARD.encode(prefix), "range_end": STANDARD.encode(prefix_end(prefix)) });
        let reply = self.call("/v3/kv/range", &request)?;
        let mut found = Vec::new();
        for kv in reply["kvs"].as_array().into_iter().flatten() {
            let decode = |field: &str| STANDARD.decode(kv[field].as_str().unwrap_or_default());
            let (Ok(key), Ok(value)) = (decode("key"), decode("value")) else {
                continue;
            };
            let key = String::from_utf8_lossy(&key);
            if let Some(rest) = key.strip_prefix(prefix) {
                found.push((rest.to_string(), value));
            }
        }
        Ok(found)
    }
}

/// The end of the range of keys that start with `prefix`: the prefix with its last byte that is
/// not 0xff raised by one (what etcdctl's `--prefix` sends).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte 0xff (or no prefix): to the end of the keyspace.
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_range_ends_past_every_key_that_starts_with_it() {
        assert_eq!(prefix_end("/rampart/acme/http-01/"), b"/rampart/acme/http-010".to_vec());
        assert_eq!(prefix_end("a"), b"b".to_vec());
        assert_eq!(prefix_end(""), vec![0]);
    }
}
