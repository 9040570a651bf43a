//! Content types by file extension: a built-in table of the types web sites serve, text types
//! with `charset=utf-8`, `application/octet-stream` for anything else.

/// The type of files whose extension is not in the table.
pub const DEFAULT_TYPE: &str = "application/octet-stream";

/// The `Content-Type` for a file called `name` (its extension compared without case).
pub fn content_type(name: &[u8]) -> &'static str {
    let Some(dot) = name.iter().rposition(|&b| b == b'.') else {
        return DEFAULT_TYPE;
    };
    let ext = &name[dot + 1..];
    if ext.is_empty() || ext.len() > 12 {
        return DEFAULT_TYPE;
    }
    let mut lower = [0u8; 12];
    for (l, b) in lower.iter_mut().zip(ext) {
        *l = b.to_ascii_lowercase();
    }
    by_extension(&lower[..ext.len()]).unwrap_or(DEFAULT_TYPE)
}

fn by_extension(ext: &[u8]) -> Option<&'static str> {
    Some(match ext {
        b"html" | b"htm" => "text/html; charset=utf-8",
        b"css" => "text/css; charset=utf-8",
        b"js" | b"mjs" | b"cjs" => "text/javascript; charset=utf-8",
        b"json" | b"map" => "application/json; charset=utf-8",
        b"webmanifest" => "application/manifest+json; charset=utf-8",
        b"txt" | b"text" => "text/plain; charset=utf-8",
        b"md" | b"markdown" => "text/markdown; charset=utf-8",
        b"csv" => "text/csv; charset=utf-8",
        b"xml" => "text/xml; charset=utf-8",
        b"rss" => "application/rss+xml; charset=utf-8",
        b"atom" => "application/atom+xml; charset=utf-8",
        b"svg" | b"svgz" => "image/svg+xml",
        b"png" => "image/png",
        b"jpg" | b"jpeg" => "image/jpeg",
        b"gif" => "image/gif",
        b"webp" => "image/webp",
        b"avif" => "image/avif",
        b"ico" => "image/x-icon",
        b"bmp" => "image/bmp",
        b"tif" | b"tiff" => "image/tiff",
        b"woff" => "font/woff",
        b"woff2" => "font/woff2",
        b"ttf" => "font/ttf",
        b"otf" => "font/otf",
        b"eot" => "application/vnd.ms-fontobject",
        b"pdf" => "application/pdf",
        b"wasm" => "application/wasm",
        b"zip" => "application/zip",
        b"gz" => "application/gzip",
        b"tar" => "application/x-tar",
        b"mp4" | b"m4v" => "video/mp4",
        b"webm" => "video/webm",
        b"ogv" => "video/ogg",
        b"mov" => "video/quicktime",
        b"mp3" => "audio/mpeg",
        b"ogg" | b"oga" => "audio/ogg",
        b"wav" => "audio/wav",
        b"m4a" => "audio/mp4",
        b"flac" => "audio/flac",
        b"m3u8" => "application/vnd.apple.mpegurl",
        b"ts" => "video/mp2t",
        b"yaml" | b"yml" => "application/yaml; charset=utf-8",
        b"toml" => "application/toml; charset=utf-8",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_by_extension() {
        assert_eq!(content_type(b"index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type(b"APP.JS"), "text/javascript; charset=utf-8");
        assert_eq!(content_type(b"m.mjs"), "text/javascript; charset=utf-8");
        assert_eq!(content_type(b"a.css"), "text/css; charset=utf-8");
        assert_eq!(content_type(b"data.json"), "application/json; charset=utf-8");
        assert_eq!(content_type(b"app.js.map"), "application/json; charset=utf-8");
        assert_eq!(content_type(b"logo.svg"), "image/svg+xml");
        assert_eq!(content_type(b"p.jpeg"), "image/jpeg");
        assert_eq!(content_type(b"f.woff2"), "font/woff2");
        assert_eq!(content_type(b"m.wasm"), "application/wasm");
        assert_eq!(content_type(b"v.mp4"), "video/mp4");
        assert_eq!(content_type(b"notes.txt"), "text/plain; charset=utf-8");
    }

    #[test]
    fn unknown_or_missing_extensions_are_octet_streams() {
        assert_eq!(content_type(b"README"), DEFAULT_TYPE);
        assert_eq!(content_type(b"archive.xyz"), DEFAULT_TYPE);
        assert_eq!(content_type(b"trailing."), DEFAULT_TYPE);
        assert_eq!(content_type(b"a.averyveryverylongextension"), DEFAULT_TYPE);
        assert_eq!(content_type(b""), DEFAULT_TYPE);
    }
}
