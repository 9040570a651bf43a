//! A tiny HTTP/1.1 backend for the quickstart: answers every request with `hello from NAME`.
//!
//! `cargo run --example demo_backend -- 127.0.0.1:9001 one`

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:9001".into());
    let name = args.next().unwrap_or_else(|| "demo".into());
    let listener = TcpListener::bind(&addr)?;
    eprintln!("demo backend {name} listening on {addr}");
    for conn in listener.incoming().flatten() {
        let name = name.clone();
        std::thread::spawn(move || serve(conn, &name));
    }
    Ok(())
}

fn serve(conn: TcpStream, name: &str) {
    let Ok(mut out) = conn.try_clone() else { return };
    let mut reader = BufReader::new(conn);
    let body = format!("hello from {name}\n");
    loop {
        // Read one request head; bodies are not expected.
        let mut line = String::new();
        let mut close = false;
        let mut first = true;
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if first && line.starts_with("HTTP/1.0") {
                close = true;
            }
            first = false;
            if line.to_ascii_lowercase().starts_with("connection: close") {
                close = true;
            }
            if line == "\r\n" || line == "\n" {
                break;
            }
        }
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n{}\r\n{body}",
            body.len(),
            if close { "connection: close\r\n" } else { "" }
        );
        if out.write_all(response.as_bytes()).is_err() || close {
            return;
        }
    }
}
