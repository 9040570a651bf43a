//! One request to the `static` action, from its path to what is sent: find the file (index,
//! directory redirect, listing, fallback), pick a precompressed sibling, evaluate the
//! preconditions and the range, and write the response head. The caller sends the head through
//! the downstream seam, then the body (small files read here, larger ones sent from the file).
//!
//! File system calls are blocking, as nginx's are without aio: an open, an fstat and, for small
//! files, one read. Nothing here waits on the network.

use std::fs::{File, Metadata};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;

use rampart_model::route::StaticFiles;
use rampart_proto::h1::{Field, Framing, Parsed, Version};

use super::conditional::{self, HeaderSource, Precondition, Validators};
use super::encoding::{Accepted, Coding};
use super::path::{RelPath, Root};
use super::range::{self, RangeRequest};
use super::{listing, mime};
use crate::http::date;
use crate::http::local::reason;

/// Files up to this size are read into the response buffer and leave with the head in one
/// write; larger ones are sent from the file (sendfile(2) on plain TCP).
pub const SMALL_FILE: u64 = 16 * 1024;

/// One request, as the action sees it.
pub struct StaticRequest<'a, H> {
    pub method: &'a [u8],
    /// The path to serve: the request's after the route's rewrites, without the query.
    pub path: &'a [u8],
    /// The path and query as the client sent them (for a directory's redirect).
    pub client_path: &'a [u8],
    pub client_query: &'a [u8],
    pub headers: &'a H,
}

/// What to answer.
pub enum Prepared {
    /// A response with status `status` whose head (status line and fields, as HTTP/1.1 text,
    /// the fields' ranges in the field list) fills the start of the output buffer; `head` is
    /// what the HTTP/1 codec would say of that text (its length, its framing).
    Response { status: u16, head: Parsed, body: Body },
    /// An answer of Rampart's own (errors, redirects), with at most one field of its own.
    Local {
        status: u16,
        field: Option<(&'static str, String)>,
    },
}

/// The body behind a prepared head.
pub enum Body {
    /// None (HEAD, 304).
    Empty,
    /// In the output buffer, right behind the head.
    Buffered,
    /// `len` bytes of `file` from `offset`.
    File { file: File, offset: u64, len: u64 },
}

fn local(status: u16) -> Prepared {
    Prepared::Local { status, field: None }
}

/// What a path names.
enum Found {
    /// A regular file (its path is in the `RelPath`).
    File(File, Metadata),
    /// A directory asked for without its trailing `/`.
    Redirect,
    /// A directory to list.
    Listing,
    /// Nothing to serve: 404, or the fallback.
    Missing,
    /// Another error status (403, 500).
    Status(u16),
}

/// Prepares the answer to `req`: the head goes into `out` (cleared first) with its fields'
/// ranges in `fields`.
pub fn prepare<H: HeaderSource>(
    files: &StaticFiles,
    req: &StaticRequest<'_, H>,
    out: &mut Vec<u8>,
    fields: &mut Vec<Field>,
) -> Prepared {
    let head_only = match req.method {
        b"GET" => false,
        b"HEAD" => true,
        _ => {
            return Prepared::Local {
                status: 405,
                field: Some(("allow", "GET, HEAD".to_string())),
            }
        }
    };
    let Ok(mut rel) = RelPath::from_request(req.path) else {
        return local(400);
    };
    let root = match Root::open(&files.root) {
        Ok(root) => root,
        Err(e) => return local(error_status(&e)),
    };
    let mut found = find(files, &root, &mut rel);
    if matches!(found, Found::Missing) {
        if let Some(fallback) = &files.fallback {
            if let Ok(f) = RelPath::from_request(fallback.as_bytes()) {
                rel = f;
                found = match find(files, &root, &mut rel) {
                    found @ (Found::File(..) | Found::Status(_)) => found,
                    _ => Found::Missing,
                };
            }
        }
    }
    match found {
        Found::File(file, meta) => file_answer(files, &root, &mut rel, file, meta, req, head_only, out, fields),
        Found::Redirect => Prepared::Local {
            status: 301,
            field: Some(("location", directory_location(req.client_path, req.client_query))),
        },
        Found::Listing => {
            let dir = files.root.join(std::ffi::OsStr::from_bytes(rel.as_bytes()));
            match listing::page(&dir, req.client_path) {
                Ok(page) => {
                    let mut head = HeadWriter::new(out, fields, 200);
                    head.field(b"content-type", b"text/html; charset=utf-8");
                    head.number(b"content-length", page.len() as u64);
                    head.field(b"date", &date::now());
                    let (status, head) = head.finish(if head_only {
                        Framing::None
                    } else {
                        Framing::Length(page.len() as u64)
                    });
                    if head_only {
                        return Prepared::Response {
                            status,
                            head,
                            body: Body::Empty,
                        };
                    }
                    out.extend_from_slice(&page);
                    Prepared::Response {
                        status,
                        head,
                        body: Body::Buffered,
                    }
                }
                Err(e) => local(error_status(&e)),
            }
        }
        Found::Missing => local(404),
        Found::Status(status) => local(status),
    }
}

/// The status for a failed open or read: 404 for what is not there (or not reachable from the
/// root), 403 for what may not be read, 500 otherwise.
fn error_status(e: &io::Error) -> u16 {
    match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory | io::ErrorKind::InvalidFilename => 404,
        io::ErrorKind::PermissionDenied => 403,
        _ => 500,
    }
}

/// What `rel` names under the root; for a directory with an index, `rel` is left naming it.
fn find(files: &StaticFiles, root: &Root, rel: &mut RelPath) -> Found {
    let opened = root
        .open_file(&files.root, rel)
        .and_then(|f| f.metadata().map(|m| (f, m)));
    let (file, meta) = match opened {
        Ok(found) => found,
        Err(e) => {
            return match error_status(&e) {
                404 => Found::Missing,
                status => Found::Status(status),
            }
        }
    };
    if meta.is_file() {
        // `file.txt/` names no file.
        return if rel.dir {
            Found::Missing
        } else {
            Found::File(file, meta)
        };
    }
    if !meta.is_dir() {
        return Found::Missing;
    }
    drop(file);
    let len = rel.len();
    for name in &files.index {
        if rel.append(true, name.as_bytes()) {
            let index = root
                .open_file(&files.root, rel)
                .and_then(|f| f.metadata().map(|m| (f, m)));
            if let Ok((file, meta)) = index {
                if meta.is_file() {
                    if !rel.dir {
                        return Found::Redirect;
                    }
                    return Found::File(file, meta);
                }
            }
        }
        rel.truncate(len);
    }
    match (files.list, rel.dir) {
        (true, true) => Found::Listing,
        (true, false) => Found::Redirect,
        (false, _) => Found::Missing,
    }
}

/// `Location` for a directory asked for without its `/`: the client's path with one added
/// (leading slashes folded into one, so the value can never read as another host).
fn directory_location(path: &[u8], query: &[u8]) -> String {
    let trimmed = &path[path.iter().take_while(|&&b| b == b'/').count()..];
    let mut to = String::with_capacity(path.len() + query.len() + 3);
    to.push('/');
    to.push_str(&String::from_utf8_lossy(trimmed));
    to.push('/');
    if !query.is_empty() {
        to.push('?');
        to.push_str(&String::from_utf8_lossy(query));
    }
    to
}

/// The answer for a regular file.
#[allow(clippy::too_many_arguments)]
fn file_answer<H: HeaderSource>(
    files: &StaticFiles,
    root: &Root,
    rel: &mut RelPath,
    mut file: File,
    mut meta: Metadata,
    req: &StaticRequest<'_, H>,
    head_only: bool,
    out: &mut Vec<u8>,
    fields: &mut Vec<Field>,
) -> Prepared {
    let mut coding = None;
    if files.precompressed {
        let accepted = Accepted::from_values(req.headers.values("accept-encoding"));
        if accepted.any() {
            let len = rel.len();
            for c in Coding::ALL.into_iter().filter(|c| accepted.allows(*c)) {
                if rel.append(false, c.suffix()) {
                    let sibling = root
                        .open_file(&files.root, rel)
                        .and_then(|f| f.metadata().map(|m| (f, m)));
                    rel.truncate(len);
                    if let Ok((f, m)) = sibling {
                        if m.is_file() {
                            (file, meta, coding) = (f, m, Some(c));
                            break;
                        }
                    }
                }
            }
        }
    }
    let size = meta.len();
    let validators = Validators {
        mtime: meta.modified().map_or(0, date::unix_seconds),
        size,
    };
    let etag = validators.etag();
    let last_modified = date::format(validators.mtime);
    let common = |head: &mut HeadWriter<'_>| {
        head.field(b"last-modified", &last_modified);
        head.field(b"etag", etag.as_bytes());
        if files.precompressed {
            head.field(b"vary", b"Accept-Encoding");
        }
        head.field(b"date", &date::now());
    };
    match conditional::evaluate(req.headers, &validators) {
        Precondition::Proceed => {}
        Precondition::Failed => return local(412),
        Precondition::NotModified => {
            let mut head = HeadWriter::new(out, fields, 304);
            common(&mut head);
            let (status, head) = head.finish(Framing::None);
            return Prepared::Response {
                status,
                head,
                body: Body::Empty,
            };
        }
    }
    let mut wanted = RangeRequest::Full;
    if !head_only {
        if let Some(value) = req.headers.values("range").next() {
            let if_range = req.headers.values("if-range").next();
            if if_range.is_none_or(|v| conditional::if_range_holds(v, &validators)) {
                wanted = range::parse(value, size);
            }
        }
    }
    let (status, offset, len) = match wanted {
        RangeRequest::Full => (200, 0, size),
        RangeRequest::Part { start, end } => (206, start, end - start + 1),
        RangeRequest::Unsatisfiable => {
            return Prepared::Local {
                status: 416,
                field: Some(("content-range", format!("bytes */{size}"))),
            }
        }
    };
    let mut head = HeadWriter::new(out, fields, status);
    head.field(b"content-type", mime::content_type(rel.file_name()).as_bytes());
    head.number(b"content-length", len);
    if status == 206 {
        head.content_range(offset, len, size);
    }
    if let Some(c) = coding {
        head.field(b"content-encoding", c.name().as_bytes());
    }
    head.field(b"accept-ranges", b"bytes");
    common(&mut head);
    if head_only {
        let (status, head) = head.finish(Framing::None);
        return Prepared::Response {
            status,
            head,
            body: Body::Empty,
        };
    }
    let (status, head) = head.finish(Framing::Length(len));
    if len > SMALL_FILE {
        return Prepared::Response {
            status,
            head,
            body: Body::File { file, offset, len },
        };
    }
    match read_exact_at(&file, out, offset, len as usize) {
        Ok(()) => Prepared::Response {
            status,
            head,
            body: Body::Buffered,
        },
        Err(_) => local(500),
    }
}

/// Appends `len` bytes of `file` from `offset` to `out`; a file that ends early is an error.
fn read_exact_at(file: &File, out: &mut Vec<u8>, offset: u64, len: usize) -> io::Result<()> {
    let start = out.len();
    out.resize(start + len, 0);
    let result = file.read_exact_at(&mut out[start..], offset);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

/// Writes a response head (status line, fields, final CRLF) and records its fields' ranges.
struct HeadWriter<'o> {
    out: &'o mut Vec<u8>,
    fields: &'o mut Vec<Field>,
    status: u16,
}

impl<'o> HeadWriter<'o> {
    fn new(out: &'o mut Vec<u8>, fields: &'o mut Vec<Field>, status: u16) -> Self {
        out.clear();
        fields.clear();
        let _ = write!(out, "HTTP/1.1 {status} {}\r\n", reason(status));
        HeadWriter { out, fields, status }
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        let start = self.out.len() as u32;
        self.out.extend_from_slice(name);
        self.out.extend_from_slice(b": ");
        let value_start = self.out.len() as u32;
        self.out.extend_from_slice(value);
        self.fields.push(Field {
            name: (start, start + name.len() as u32),
            value: (value_start, self.out.len() as u32),
        });
        self.out.extend_from_slice(b"\r\n");
    }

    /// A field whose value is written by `value`.
    fn field_with(&mut self, name: &[u8], value: impl FnOnce(&mut Vec<u8>)) {
        let start = self.out.len() as u32;
        self.out.extend_from_slice(name);
        self.out.extend_from_slice(b": ");
        let value_start = self.out.len() as u32;
        value(self.out);
        self.fields.push(Field {
            name: (start, start + name.len() as u32),
            value: (value_start, self.out.len() as u32),
        });
        self.out.extend_from_slice(b"\r\n");
    }

    fn number(&mut self, name: &[u8], n: u64) {
        self.field_with(name, |out| {
            let _ = write!(out, "{n}");
        });
    }

    fn content_range(&mut self, offset: u64, len: u64, size: u64) {
        self.field_with(b"content-range", |out| {
            let _ = write!(out, "bytes {offset}-{}/{size}", offset + len - 1);
        });
    }

    /// Ends the head: its status, and what the HTTP/1 codec would say of it.
    fn finish(self, framing: Framing) -> (u16, Parsed) {
        self.out.extend_from_slice(b"\r\n");
        let head = Parsed {
            len: self.out.len(),
            version: Version::Http11,
            framing,
            keep_alive: true,
            reason: (0, 0),
        };
        (self.status, head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_redirects_stay_on_this_host() {
        assert_eq!(directory_location(b"/docs", b""), "/docs/");
        assert_eq!(directory_location(b"/docs", b"a=1"), "/docs/?a=1");
        assert_eq!(directory_location(b"//evil.example", b""), "/evil.example/");
    }

    #[test]
    fn heads_record_their_fields() {
        let (mut out, mut fields) = (Vec::new(), Vec::new());
        let mut head = HeadWriter::new(&mut out, &mut fields, 206);
        head.field(b"content-type", b"text/plain");
        head.number(b"content-length", 10);
        head.content_range(5, 10, 100);
        let (status, head) = head.finish(Framing::Length(10));
        assert_eq!(status, 206);
        assert_eq!(
            out,
            b"HTTP/1.1 206 Partial Content\r\ncontent-type: text/plain\r\ncontent-length: 10\r\n\
              content-range: bytes 5-14/100\r\n\r\n"
        );
        assert_eq!(head.len, out.len());
        assert_eq!(fields.len(), 3);
        assert_eq!(fields[2].name(&out), b"content-range");
        assert_eq!(fields[2].value(&out), b"bytes 5-14/100");
        assert_eq!(fields[1].value(&out), b"10");
    }
}
