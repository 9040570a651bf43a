//! Directory listings (`list = true`): a plain HTML page of the names in a directory, sorted,
//! directories with a trailing `/`. Names starting with `.` are left out (as nginx's autoindex
//! does); every name is percent-encoded in its link and HTML-escaped in its text. At most
//! [`MAX_ENTRIES`] names are shown.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The most names one listing shows.
pub const MAX_ENTRIES: usize = 10_000;

/// The listing page of directory `dir`, titled with `shown` (the request path as the client sent
/// it).
pub fn page(dir: &Path, shown: &[u8]) -> io::Result<Vec<u8>> {
    let mut names: Vec<(Vec<u8>, bool)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.as_bytes();
        if name.starts_with(b".") {
            continue;
        }
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        names.push((name.to_vec(), is_dir));
        if names.len() == MAX_ENTRIES {
            break;
        }
    }
    names.sort();
    let mut out = Vec::with_capacity(256 + names.len() * 64);
    out.extend_from_slice(b"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of ");
    escape_html(&mut out, shown);
    out.extend_from_slice(b"</title></head>\n<body><h1>Index of ");
    escape_html(&mut out, shown);
    out.extend_from_slice(b"</h1>\n<ul>\n<li><a href=\"../\">../</a></li>\n");
    for (name, is_dir) in &names {
        out.extend_from_slice(b"<li><a href=\"./");
        percent_encode(&mut out, name);
        if *is_dir {
            out.push(b'/');
        }
        out.extend_from_slice(b"\">");
        escape_html(&mut out, name);
        if *is_dir {
            out.push(b'/');
        }
        out.extend_from_slice(b"</a></li>\n");
    }
    out.extend_from_slice(b"</ul>\n</body></html>\n");
    Ok(out)
}

/// Text as HTML: `& < > " '` escaped, bytes that are not UTF-8 replaced.
fn escape_html(out: &mut Vec<u8>, text: &[u8]) {
    for c in String::from_utf8_lossy(text).chars() {
        match c {
            '&' => out.extend_from_slice(b"&amp;"),
            '<' => out.extend_from_slice(b"&lt;"),
            '>' => out.extend_from_slice(b"&gt;"),
            '"' => out.extend_from_slice(b"&quot;"),
            '\'' => out.extend_from_slice(b"&#39;"),
            c => {
                let mut utf8 = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
            }
        }
    }
}

/// A path segment for a URL: everything but unreserved characters percent-encoded.
fn percent_encode(out: &mut Vec<u8>, name: &[u8]) {
    for &b in name {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.push(b'%');
            out.push(b"0123456789ABCDEF"[usize::from(b >> 4)]);
            out.push(b"0123456789ABCDEF"[usize::from(b & 0xf)]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_encoded_and_sorted() {
        let dir = std::env::temp_dir().join(format!("rampart-listing-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub dir")).unwrap();
        std::fs::write(dir.join("b.txt"), b"").unwrap();
        std::fs::write(dir.join("<a>&\"'.html"), b"").unwrap();
        std::fs::write(dir.join(".secret"), b"").unwrap();
        let page = String::from_utf8(page(&dir, b"/files/<x>/").unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(page.contains("<title>Index of /files/&lt;x&gt;/</title>"), "{page}");
        assert!(
            page.contains("<a href=\"./%3Ca%3E%26%22%27.html\">&lt;a&gt;&amp;&quot;&#39;.html</a>"),
            "{page}"
        );
        assert!(page.contains("<a href=\"./sub%20dir/\">sub dir/</a>"), "{page}");
        assert!(!page.contains("secret"), "{page}");
        let (a, b) = (page.find("&lt;a&gt;").unwrap(), page.find("b.txt").unwrap());
        assert!(a < b, "sorted by name");
    }
}
